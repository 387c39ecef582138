// GDN recurrent step: each state row S[:, v] (Dk floats) is read once, decayed, used for u = Sᵀk, updated
// and used for o = Sᵀq while it sits in registers. Attention: each KV row is read once for all query heads
// of its KV head (GQA packing), with an online softmax per head; the KV heads x position blocks are split
// across threads and merged.
// GCC 12 reports a false maybe-uninitialized inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu/fast/avx2_util.h"
#endif

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/fast/cpu_isa.h"
#include "cpu/fast/q4_kernels.h"
#include "cpu/fast/seq_kernels.h"
#include "cpu/ref_ops.h"
#include "cpu/thread_pool.h"

namespace lily::fast {

#if defined(__x86_64__)
#define LILY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace {

// Dk == 128: the row lives in 8 registers.
LILY_AVX512 void gdn_head_128(float* Sj, const float* q, const float* k, const float* v, float alpha, float beta,
                              int Dv, float* o) {
  __m512 kk[8], qq[8];
  for (int c = 0; c < 8; ++c) {
    kk[c] = _mm512_loadu_ps(k + 16 * c);
    qq[c] = _mm512_loadu_ps(q + 16 * c);
  }
  const __m512 va = _mm512_set1_ps(alpha);
  for (int r = 0; r < Dv; ++r) {
    float* row = Sj + static_cast<size_t>(r) * 128;
    __m512 s[8];
    __m512 u = _mm512_setzero_ps();
    for (int c = 0; c < 8; ++c) {
      s[c] = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * c), va);
      u = _mm512_fmadd_ps(s[c], kk[c], u);
    }
    const __m512 d = _mm512_set1_ps(beta * (v[r] - _mm512_reduce_add_ps(u)));
    __m512 out = _mm512_setzero_ps();
    for (int c = 0; c < 8; ++c) {
      s[c] = _mm512_fmadd_ps(kk[c], d, s[c]);
      out = _mm512_fmadd_ps(s[c], qq[c], out);
      _mm512_storeu_ps(row + 16 * c, s[c]);
    }
    o[r] = _mm512_reduce_add_ps(out);
  }
}

// AVX2 + FMA version: each 16-lane register of the AVX-512 one is two 8-lane registers updated with the same
// operations, the dot products summed in _mm512_reduce_add_ps's order: bit-identical results. The row does not
// fit in 16 ymm registers next to k and q: the decayed row is stored and read back (exact) between the passes.
LILY_AVX2 void gdn_head_128_avx2(float* Sj, const float* q, const float* k, const float* v, float alpha, float beta,
                                 int Dv, float* o) {
  const __m256 va = _mm256_set1_ps(alpha);
  for (int r = 0; r < Dv; ++r) {
    float* row = Sj + static_cast<size_t>(r) * 128;
    __m256 u[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int c = 0; c < 16; ++c) {
      const __m256 sc = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * c), va);
      u[c & 1] = _mm256_fmadd_ps(sc, _mm256_loadu_ps(k + 8 * c), u[c & 1]);
      _mm256_storeu_ps(row + 8 * c, sc);
    }
    const __m256 d = _mm256_set1_ps(beta * (v[r] - reduce_add16_avx2(u[0], u[1])));
    __m256 out[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int c = 0; c < 16; ++c) {
      const __m256 sc = _mm256_fmadd_ps(_mm256_loadu_ps(k + 8 * c), d, _mm256_loadu_ps(row + 8 * c));
      out[c & 1] = _mm256_fmadd_ps(sc, _mm256_loadu_ps(q + 8 * c), out[c & 1]);
      _mm256_storeu_ps(row + 8 * c, sc);
    }
    o[r] = reduce_add16_avx2(out[0], out[1]);
  }
}

// The SIMD tier of these kernels: AVX-512, AVX2 (bit-identical to it) or none (the reference kernels).
bool simd() { return active_isa() != Isa::Portable; }

void gdn_head(float* Sj, const float* q, const float* k, const float* v, float alpha, float beta, int Dv, float* o) {
  if (active_isa() == Isa::Avx512)
    gdn_head_128(Sj, q, k, v, alpha, beta, Dv, o);
  else
    gdn_head_128_avx2(Sj, q, k, v, alpha, beta, Dv, o);
}

}  // namespace

void gdn_step(float* S, const float* q, const float* k, const float* v, const float* g, const float* beta,
              int Hk, int Hv, int Dk, int Dv, float* o) {
  if (Dk != 128 || !simd()) {
    ref::gdn_step(S, q, k, v, g, beta, Hk, Hv, Dk, Dv, o);
    return;
  }
  const int rep = Hv / Hk;
  ThreadPool::global().parallel_for(Hv, [&](int j, int) {
    gdn_head(S + static_cast<size_t>(j) * Dv * Dk, q + (j / rep) * Dk, k + (j / rep) * Dk, v + j * Dv,
                 std::exp(g[j]), beta[j], Dv, o + j * Dv);
  });
}

void gdn_scan(float* S, const float* q, const float* k, const float* v, size_t xs, const float* g, const float* beta,
              int n, int Hk, int Hv, int Dk, int Dv, float* o) {
  if (Dk != 128 || !simd()) {
    ref::gdn_scan(S, q, k, v, xs, g, beta, n, Hk, Hv, Dk, Dv, o);
    return;
  }
  const int rep = Hv / Hk;
  ThreadPool::global().parallel_for(Hv, [&](int j, int) {
    float* Sj = S + static_cast<size_t>(j) * Dv * Dk;
    for (int t = 0; t < n; ++t) {
      const size_t x0 = t * xs, gt = static_cast<size_t>(t) * Hv + j;
      gdn_head(Sj, q + x0 + (j / rep) * Dk, k + x0 + (j / rep) * Dk, v + x0 + j * Dv, std::exp(g[gt]), beta[gt], Dv,
                   o + static_cast<size_t>(t) * Hv * Dv + j * Dv);
    }
  });
}

namespace {

// Partial attention of the `group` query heads of KV head `kvh` over positions [t0, t1):
// running max m[h], sum l[h] and unnormalised output acc[h][hd].
LILY_AVX512 void attn_block(const float* q, const float* kc, const float* vc, int t0, int t1, int nkv, int hd,
                            int kvh, int group, float scale, float* m, float* l, float* acc) {
  for (int h = 0; h < group; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }
  std::fill(acc, acc + static_cast<size_t>(group) * hd, 0.0f);
  const int nv = hd / 16;
  for (int t = t0; t < t1; ++t) {
    const float* kt = kc + (static_cast<size_t>(t) * nkv + kvh) * hd;
    const float* vt = vc + (static_cast<size_t>(t) * nkv + kvh) * hd;
    for (int h = 0; h < group; ++h) {
      const float* qh = q + h * hd;
      __m512 d = _mm512_setzero_ps();
      for (int c = 0; c < nv; ++c) d = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * c), _mm512_loadu_ps(kt + 16 * c), d);
      const float s = _mm512_reduce_add_ps(d) * scale;
      float* ah = acc + static_cast<size_t>(h) * hd;
      if (s > m[h]) {  // rescale the running sums to the new maximum
        const float f = std::exp(m[h] - s);
        l[h] *= f;
        const __m512 vf = _mm512_set1_ps(f);
        for (int c = 0; c < nv; ++c) _mm512_storeu_ps(ah + 16 * c, _mm512_mul_ps(_mm512_loadu_ps(ah + 16 * c), vf));
        m[h] = s;
      }
      const float p = std::exp(s - m[h]);
      l[h] += p;
      const __m512 vp = _mm512_set1_ps(p);
      for (int c = 0; c < nv; ++c)
        _mm512_storeu_ps(ah + 16 * c, _mm512_fmadd_ps(vp, _mm512_loadu_ps(vt + 16 * c), _mm512_loadu_ps(ah + 16 * c)));
    }
  }
}

// AVX2 + FMA version of attn_block, bit-identical to it (16-lane registers as pairs of 8-lane ones).
LILY_AVX2 void attn_block_avx2(const float* q, const float* kc, const float* vc, int t0, int t1, int nkv, int hd,
                               int kvh, int group, float scale, float* m, float* l, float* acc) {
  for (int h = 0; h < group; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }
  std::fill(acc, acc + static_cast<size_t>(group) * hd, 0.0f);
  const int nv = hd / 8;
  for (int t = t0; t < t1; ++t) {
    const float* kt = kc + (static_cast<size_t>(t) * nkv + kvh) * hd;
    const float* vt = vc + (static_cast<size_t>(t) * nkv + kvh) * hd;
    for (int h = 0; h < group; ++h) {
      const float* qh = q + h * hd;
      __m256 d[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int c = 0; c < nv; ++c)
        d[c & 1] = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8 * c), _mm256_loadu_ps(kt + 8 * c), d[c & 1]);
      const float s = reduce_add16_avx2(d[0], d[1]) * scale;
      float* ah = acc + static_cast<size_t>(h) * hd;
      if (s > m[h]) {
        const float f = std::exp(m[h] - s);
        l[h] *= f;
        const __m256 vf = _mm256_set1_ps(f);
        for (int c = 0; c < nv; ++c) _mm256_storeu_ps(ah + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(ah + 8 * c), vf));
        m[h] = s;
      }
      const float p = std::exp(s - m[h]);
      l[h] += p;
      const __m256 vp = _mm256_set1_ps(p);
      for (int c = 0; c < nv; ++c)
        _mm256_storeu_ps(ah + 8 * c, _mm256_fmadd_ps(vp, _mm256_loadu_ps(vt + 8 * c), _mm256_loadu_ps(ah + 8 * c)));
    }
  }
}

}  // namespace

void attention_one(const float* q, const float* kc, const float* vc, int T, int nq, int nkv, int hd, float* out) {
  if (hd % 16 != 0 || !simd() || nq % nkv != 0) {
    ref::attention_one(q, kc, vc, T, nq, nkv, hd, out);
    return;
  }
  const int group = nq / nkv;
  const Isa isa = active_isa();
  ThreadPool& pool = ThreadPool::global();
  const int blocks = std::max(1, std::min((T + 255) / 256, 4 * pool.size()));  // split-KV at long context
  const int per = (T + blocks - 1) / blocks;
  thread_local std::vector<float> part;  // [nkv][blocks][group] m, l, then acc [group][hd]
  const size_t stride = static_cast<size_t>(group) * (2 + hd);
  if (part.size() < stride * nkv * blocks) part.resize(stride * nkv * blocks);
  float* P = part.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool.parallel_for(nkv * blocks, [&](int task, int) {
    const int kvh = task / blocks, b = task % blocks;
    const int t0 = b * per, t1 = std::min(T, t0 + per);
    float* base = P + stride * task;
    const float* qk = q + static_cast<size_t>(kvh) * group * hd;
    if (isa == Isa::Avx512)
      attn_block(qk, kc, vc, t0, std::max(t0, t1), nkv, hd, kvh, group, scale, base, base + group, base + 2 * group);
    else
      attn_block_avx2(qk, kc, vc, t0, std::max(t0, t1), nkv, hd, kvh, group, scale, base, base + group,
                      base + 2 * group);
  });
  for (int kvh = 0; kvh < nkv; ++kvh)
    for (int h = 0; h < group; ++h) {
      float M = -INFINITY;
      for (int b = 0; b < blocks; ++b) M = std::max(M, P[stride * (kvh * blocks + b) + h]);
      float L = 0.0f;
      float* o = out + (static_cast<size_t>(kvh) * group + h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (int b = 0; b < blocks; ++b) {
        const float* base = P + stride * (kvh * blocks + b);
        if (base[h] == -INFINITY) continue;  // empty block
        const float f = std::exp(base[h] - M);
        L += base[group + h] * f;
        const float* a = base + 2 * group + static_cast<size_t>(h) * hd;
        for (int i = 0; i < hd; ++i) o[i] += a[i] * f;
      }
      for (int i = 0; i < hd; ++i) o[i] /= L;
    }
}

#else  // not x86-64: the reference kernels

void gdn_scan(float* S, const float* q, const float* k, const float* v, size_t xs, const float* g, const float* beta,
              int n, int Hk, int Hv, int Dk, int Dv, float* o) {
  ref::gdn_scan(S, q, k, v, xs, g, beta, n, Hk, Hv, Dk, Dv, o);
}
void gdn_step(float* S, const float* q, const float* k, const float* v, const float* g, const float* beta,
              int Hk, int Hv, int Dk, int Dv, float* o) {
  ref::gdn_step(S, q, k, v, g, beta, Hk, Hv, Dk, Dv, o);
}
void attention_one(const float* q, const float* kc, const float* vc, int T, int nq, int nkv, int hd, float* out) {
  ref::attention_one(q, kc, vc, T, nq, nkv, hd, out);
}

#endif

}  // namespace lily::fast
