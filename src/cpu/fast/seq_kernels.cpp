// GDN recurrent step: each state row S[:, v] (Dk floats) is read once, decayed, used for u = Sᵀk, updated
// and used for o = Sᵀq while it sits in registers. Attention: each KV row is read once for all query heads
// of its KV head (GQA packing), in blocks of positions (scores, then a block softmax, then V); the KV heads x
// position ranges are split across threads and merged.
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
              int n, int Hk, int Hv, int Dk, int Dv, float* o, float* snaps, int n_snaps) {
  if (Dk != 128 || !simd()) {
    ref::gdn_scan(S, q, k, v, xs, g, beta, n, Hk, Hv, Dk, Dv, o, snaps, n_snaps);
    return;
  }
  const int rep = Hv / Hk;
  const size_t hs = static_cast<size_t>(Dv) * Dk, ss = static_cast<size_t>(Hv) * hs;
  ThreadPool::global().parallel_for(Hv, [&](int j, int) {
    float* Sj = S + static_cast<size_t>(j) * hs;
    for (int t = 0; t < n; ++t) {
      const size_t x0 = t * xs, gt = static_cast<size_t>(t) * Hv + j;
      gdn_head(Sj, q + x0 + (j / rep) * Dk, k + x0 + (j / rep) * Dk, v + x0 + j * Dv, std::exp(g[gt]), beta[gt], Dv,
                   o + static_cast<size_t>(t) * Hv * Dv + j * Dv);
      if (snaps && t < n_snaps) std::copy(Sj, Sj + hs, snaps + static_cast<size_t>(t) * ss + static_cast<size_t>(j) * hs);
    }
  });
}

namespace {

// Decode attention. Positions go in blocks of kBT: (1) the scores of the block for the G query heads of one KV
// head (each K row read once, the G dot products in G accumulators, reduced together), (2) the block's softmax
// update (block max, one rescale of the running sums per head, exp), (3) the V rows added into the running
// output, a 2-register (AVX-512) or 1-register (AVX2) slice of all G heads' outputs held in registers across
// the block's rows. While a block is scored its V rows and the K rows kPF positions ahead are prefetched.
// A thread takes a range of positions for all KV heads, so K and V are read in address order.
//
// Both SIMD tiers give the same bits: a score is Σ over 16-float chunks of q·k in one 16-lane accumulator
// (fma per chunk in order) reduced in _mm512_reduce_add_ps's order (the AVX-512 code reduces 16 accumulators
// at once by a tree of shuffles that adds the same pairs), times the scale; the softmax is the same scalar
// code; each output lane gets fma(p_t, v_t, acc) for t in order, and the rescales multiply it exactly.
// kBT is small, probably because the V pass reads one 128-byte slice of each of the block's rows at a time and
// rows 2 KiB apart share L1 sets (measured, 32K positions x 10 layers, 2 threads, AMD EPYC: 8 rows 48-54 ms,
// 16 rows 55, 32 rows 61, 64 rows 62).
constexpr int kBT = 8;   // positions per block
constexpr int kNK = 4;   // KV heads per pass over the rows
constexpr int kPF = 32;  // K prefetch distance, positions

// Prefetch n floats from r (n a multiple of 16) into L1.
inline void prefetch_row(const float* r, int n) {
  for (int i = 0; i < n; i += 16) __builtin_prefetch(r + i, 0, 3);
}
// Softmax step of one block (scalar, no target attributes so both tiers run the same code): s [n][8] holds the
// scores on entry and the weights exp(s - m) on return; m, l, acc [G][hd] are rescaled to the new maxima.
template <int G>
__attribute__((noinline)) void block_softmax(float* s, int n, int hd, float* m, float* l, float* acc) {
  for (int h = 0; h < G; ++h) {
    float bm = m[h];
    for (int t = 0; t < n; ++t) bm = std::max(bm, s[t * 8 + h]);
    if (bm > m[h]) {
      const float f = std::exp(m[h] - bm);
      l[h] *= f;
      float* ah = acc + static_cast<size_t>(h) * hd;
      for (int i = 0; i < hd; ++i) ah[i] *= f;
      m[h] = bm;
    }
    float sum = l[h];
    for (int t = 0; t < n; ++t) sum += (s[t * 8 + h] = std::exp(s[t * 8 + h] - m[h]));
    l[h] = sum;
  }
}

// Σ of each of 16 registers a[j] (j < 8: position 0's heads, j >= 8: position 1's) into lane j of the result;
// per register the same pairs are added as in _mm512_reduce_add_ps (256-bit halves, 128-bit halves, lanes
// {0,1} + {2,3}, lane 0 + lane 1).
LILY_AVX512 inline __m512 reduce16_512(const __m512* a) {
  __m512 x[8], y[4], z[2];
  for (int i = 0; i < 8; ++i)
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; ++i)
    y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; ++i)
    z[i] = _mm512_add_ps(_mm512_shuffle_ps(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // r[4k + m] = sum of a[4m + k]
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, r);
}

// Empty partials (m = -inf, l = 0, acc = 0) for ng KV heads of G query heads: [m[G] | l[G] | acc[G][hd]] each,
// stride floats apart.
inline void init_partials(float* part, size_t stride, int ng, int G, int hd) {
  for (int j = 0; j < ng; ++j) {
    float* pb = part + j * stride;
    std::fill(pb, pb + G, -INFINITY);
    std::fill(pb + G, pb + 2 * G + static_cast<size_t>(G) * hd, 0.0f);
  }
}

// Partial attention over positions [t0, t1) of every KV head: part + kvh * stride holds KV head kvh's running
// max m[G], sum l[G] and unnormalised output acc[G][hd] for its G query heads. The KV heads go in groups of up
// to kNK so that K and V are read in row order (a row holds all KV heads).
template <int G>
LILY_AVX512 void attn_range(const float* q, const float* kc, const float* vc, int t0, int t1, int nkv, int hd,
                            float scale, float* part, size_t stride) {
  const size_t rs = static_cast<size_t>(nkv) * hd;  // row stride
  alignas(64) float s[kNK][kBT * 8];
  const __m512 vs = _mm512_set1_ps(scale);
  for (int g0 = 0; g0 < nkv; g0 += kNK) {
    const int ng = std::min(kNK, nkv - g0);
    init_partials(part + g0 * stride, stride, ng, G, hd);
    for (int b0 = t0; b0 < t1; b0 += kBT) {
      const int n = std::min(kBT, t1 - b0);
      for (int i = 0; i < n; i += 2) {  // scores, two positions at a time
        const int t = b0 + i, u = i + 1 < n ? t + 1 : t;
        if (t + kPF < t1) prefetch_row(kc + (t + kPF) * rs + g0 * hd, ng * hd);
        if (t + kPF + 1 < t1) prefetch_row(kc + (t + kPF + 1) * rs + g0 * hd, ng * hd);
        prefetch_row(vc + t * rs + g0 * hd, ng * hd);
        prefetch_row(vc + u * rs + g0 * hd, ng * hd);
        for (int j = 0; j < ng; ++j) {
          const int kvh = g0 + j;
          const float* k0 = kc + t * rs + kvh * hd;
          const float* k1 = kc + u * rs + kvh * hd;
          const float* qk = q + static_cast<size_t>(kvh) * G * hd;
          __m512 a[16];
          for (int x = 0; x < 16; ++x) a[x] = _mm512_setzero_ps();
          for (int c = 0; c < hd; c += 16) {
            const __m512 x0 = _mm512_loadu_ps(k0 + c), x1 = _mm512_loadu_ps(k1 + c);
            for (int h = 0; h < G; ++h) {
              __m512 qq = _mm512_loadu_ps(qk + h * hd + c);
              asm("" : "+v"(qq));  // one load of q for both positions (GCC folds it into both FMAs otherwise)
              a[h] = _mm512_fmadd_ps(qq, x0, a[h]);
              a[8 + h] = _mm512_fmadd_ps(qq, x1, a[8 + h]);
            }
          }
          float* sj = s[j] + i * 8;
          if constexpr (G == 8) {
            const __m512 r = _mm512_mul_ps(reduce16_512(a), vs);
            if (u != t)
              _mm512_storeu_ps(sj, r);
            else
              _mm256_storeu_ps(sj, _mm512_castps512_ps256(r));
          } else {
            for (int h = 0; h < G; ++h) {
              sj[h] = _mm512_reduce_add_ps(a[h]) * scale;
              if (u != t) sj[8 + h] = _mm512_reduce_add_ps(a[8 + h]) * scale;
            }
          }
        }
      }
      for (int j = 0; j < ng; ++j) {
        float* pb = part + (g0 + j) * stride;
        float* acc = pb + 2 * G;
        block_softmax<G>(s[j], n, hd, pb, pb + G, acc);
        const float* vb = vc + static_cast<size_t>(g0 + j) * hd;
        for (int c = 0; c < hd; c += 32) {  // V: a 32-float slice of every head's output in registers
          __m512 o[2 * G];
          for (int h = 0; h < G; ++h) {
            o[2 * h] = _mm512_loadu_ps(acc + h * hd + c);
            o[2 * h + 1] = _mm512_loadu_ps(acc + h * hd + c + 16);
          }
          for (int i = 0; i < n; ++i) {
            const float* vt = vb + (b0 + i) * rs + c;
            const __m512 v0 = _mm512_loadu_ps(vt), v1 = _mm512_loadu_ps(vt + 16);
            for (int h = 0; h < G; ++h) {
              const __m512 p = _mm512_set1_ps(s[j][i * 8 + h]);
              o[2 * h] = _mm512_fmadd_ps(p, v0, o[2 * h]);
              o[2 * h + 1] = _mm512_fmadd_ps(p, v1, o[2 * h + 1]);
            }
          }
          for (int h = 0; h < G; ++h) {
            _mm512_storeu_ps(acc + h * hd + c, o[2 * h]);
            _mm512_storeu_ps(acc + h * hd + c + 16, o[2 * h + 1]);
          }
        }
      }
    }
  }
}

// AVX2 + FMA version of attn_range, bit-identical to it: each 16-lane accumulator is a pair of 8-lane ones
// updated with the same operations, reduced by reduce_add16_avx2 (_mm512_reduce_add_ps's order).
template <int G>
LILY_AVX2 void attn_range_avx2(const float* q, const float* kc, const float* vc, int t0, int t1, int nkv, int hd,
                               float scale, float* part, size_t stride) {
  const size_t rs = static_cast<size_t>(nkv) * hd;
  alignas(64) float s[kNK][kBT * 8];
  constexpr int HG = G < 4 ? G : 4;  // heads per pass over a K row (8 accumulators)
  for (int g0 = 0; g0 < nkv; g0 += kNK) {
    const int ng = std::min(kNK, nkv - g0);
    init_partials(part + g0 * stride, stride, ng, G, hd);
    for (int b0 = t0; b0 < t1; b0 += kBT) {
      const int n = std::min(kBT, t1 - b0);
      for (int i = 0; i < n; ++i) {
        const int t = b0 + i;
        if (t + kPF < t1) prefetch_row(kc + (t + kPF) * rs + g0 * hd, ng * hd);
        prefetch_row(vc + t * rs + g0 * hd, ng * hd);
        for (int j = 0; j < ng; ++j) {
          const int kvh = g0 + j;
          const float* kt = kc + t * rs + kvh * hd;
          const float* qk = q + static_cast<size_t>(kvh) * G * hd;
          for (int h0 = 0; h0 < G; h0 += HG) {
            __m256 a[2 * HG];
            for (int x = 0; x < 2 * HG; ++x) a[x] = _mm256_setzero_ps();
            for (int c = 0; c < hd; c += 16) {
              const __m256 xl = _mm256_loadu_ps(kt + c), xh = _mm256_loadu_ps(kt + c + 8);
              for (int h = 0; h < HG; ++h) {
                const float* qh = qk + (h0 + h) * hd + c;
                a[2 * h] = _mm256_fmadd_ps(_mm256_loadu_ps(qh), xl, a[2 * h]);
                a[2 * h + 1] = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8), xh, a[2 * h + 1]);
              }
            }
            for (int h = 0; h < HG; ++h) s[j][i * 8 + h0 + h] = reduce_add16_avx2(a[2 * h], a[2 * h + 1]) * scale;
          }
        }
      }
      for (int j = 0; j < ng; ++j) {
        float* pb = part + (g0 + j) * stride;
        float* acc = pb + 2 * G;
        block_softmax<G>(s[j], n, hd, pb, pb + G, acc);
        const float* vb = vc + static_cast<size_t>(g0 + j) * hd;
        for (int c = 0; c < hd; c += 8) {
          __m256 o[G];
          for (int h = 0; h < G; ++h) o[h] = _mm256_loadu_ps(acc + h * hd + c);
          for (int i = 0; i < n; ++i) {
            const __m256 v = _mm256_loadu_ps(vb + (b0 + i) * rs + c);
            for (int h = 0; h < G; ++h) o[h] = _mm256_fmadd_ps(_mm256_set1_ps(s[j][i * 8 + h]), v, o[h]);
          }
          for (int h = 0; h < G; ++h) _mm256_storeu_ps(acc + h * hd + c, o[h]);
        }
      }
    }
  }
}

using AttnRangeFn = void (*)(const float*, const float*, const float*, int, int, int, int, float, float*, size_t);

template <int G>
AttnRangeFn pick_range(Isa isa) {
  return isa == Isa::Avx512 ? &attn_range<G> : &attn_range_avx2<G>;
}

}  // namespace

void attention_one(const float* q, const float* kc, const float* vc, int T, int nq, int nkv, int hd, float* out) {
  const int group = nkv > 0 && nq % nkv == 0 ? nq / nkv : 0;
  if (hd % 32 != 0 || !simd() || (group != 1 && group != 2 && group != 4 && group != 8)) {
    ref::attention_one(q, kc, vc, T, nq, nkv, hd, out);
    return;
  }
  const Isa isa = active_isa();
  const AttnRangeFn fn = group == 8   ? pick_range<8>(isa)
                         : group == 4 ? pick_range<4>(isa)
                         : group == 2 ? pick_range<2>(isa)
                                      : pick_range<1>(isa);
  ThreadPool& pool = ThreadPool::global();
  // split-KV: position ranges of >= 128 (all KV heads), up to 4 per thread
  const int blocks = std::max(1, std::min((T + 127) / 128, 4 * pool.size()));
  const int per = (T + blocks - 1) / blocks;
  thread_local std::vector<float> part;  // [blocks][nkv]: m [group], l [group], then acc [group][hd]
  const size_t stride = static_cast<size_t>(group) * (2 + hd);
  if (part.size() < stride * nkv * blocks) part.resize(stride * nkv * blocks);
  float* P = part.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool.parallel_for(blocks, [&](int b, int) {
    const int t0 = b * per, t1 = std::min(T, t0 + per);
    fn(q, kc, vc, t0, std::max(t0, t1), nkv, hd, scale, P + stride * nkv * b, stride);
  });
  for (int kvh = 0; kvh < nkv; ++kvh)
    for (int h = 0; h < group; ++h) {
      float M = -INFINITY;
      for (int b = 0; b < blocks; ++b) M = std::max(M, P[stride * (b * nkv + kvh) + h]);
      float L = 0.0f;
      float* o = out + (static_cast<size_t>(kvh) * group + h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (int b = 0; b < blocks; ++b) {
        const float* base = P + stride * (b * nkv + kvh);
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
