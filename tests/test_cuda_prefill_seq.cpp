// Prefill sequence kernels against the CPU reference: the GDN chunk (conv ring + delta-rule state carried across
// two chunks; each sequential scan kernel) and chunked causal attention over the bf16 KV cache (flash and
// simple). Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_buffers.h"
#include "test_metrics.h"
#include "core/dtype.h"
#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/prefill/prefill.h"
#include "gdn_token_reference.h"

using namespace lily;

namespace {

template <class T>
T* dnew(const std::vector<T>& v) {
  void* d = nullptr;
  cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(T));
  cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return static_cast<T*>(d);
}
using testcuda::down;

// parameter: the sequential scan kernel (cuda::GdnScan)
class PrefillGdn : public ::testing::TestWithParam<int> {};

TEST_P(PrefillGdn, TwoChunksMatchTokenByTokenReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int scan = GetParam();
  const int Hk = 2, Hv = 4, Dk = 64, Dv = 32, K = 4, n1 = 3, n2 = 70, n = n1 + n2;
  const int kd = Hk * Dk, vd = Hv * Dv, cd = 2 * kd + vd, P = cd + vd + 2 * Hv;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> proj(size_t(n) * P), cw(size_t(cd) * K), dtb(Hv), an(Hv), nw(Dv);
  for (auto& v : proj) v = u(rng);
  for (auto& v : cw) v = u(rng) * 0.5f;
  for (auto& v : dtb) v = u(rng);
  for (auto& v : an) v = -std::fabs(u(rng));
  for (auto& v : nw) v = 1.f + 0.3f * u(rng);
  // reference
  std::vector<float> want, S;
  testgdn::token_reference(proj.data(), P, n, cw.data(), dtb.data(), an.data(), nw.data(), Hk, Hv, Dk, Dv, K, want, S);
  // device, two chunks
  float* dproj = dnew(proj);
  cuda::GdnChunkArgs a;
  a.ldp = P;
  a.Hk = Hk; a.Hv = Hv; a.Dk = Dk; a.Dv = Dv; a.K = K;
  a.conv_w = dnew(cw); a.dt_bias = dnew(dtb); a.a_neg = dnew(an); a.norm_w = dnew(nw);
  a.ring = dnew(std::vector<float>(size_t(K) * cd, 0.f));
  a.S = dnew(std::vector<float>(S.size(), 0.f));
  a.cbuf = dnew(std::vector<float>(size_t(n) * cd, NAN));
  a.obuf = dnew(std::vector<float>(size_t(n) * vd, NAN));
  a.scan = scan;
  ASSERT_EQ(cuda::prefill_gdn_scan_kernel(a), scan) << "the requested scan kernel would not run";
  std::vector<uint16_t> yb(size_t(n) * vd, 0xFFFF);
  uint16_t* dy = dnew(yb);
  a.proj = dproj; a.n = n1; a.pos0 = 0; a.y = dy;
  cuda::prefill_gdn(a, nullptr);
  a.proj = dproj + size_t(n1) * P; a.n = n2; a.pos0 = n1; a.y = dy + size_t(n1) * vd;
  cuda::prefill_gdn(a, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto yh = down(dy, yb.size());
  std::vector<float> got(yh.size());
  for (size_t i = 0; i < yh.size(); ++i) got[i] = bf16_to_f32(yh[i]);
  const double ey = testmetrics::max_rel_err(got, want), es = testmetrics::max_rel_err(down(a.S, S.size()), S);
  std::printf("[ prefill gdn %s ] y %.2e  S %.2e\n", cuda::gdn_scan_name(scan), ey, es);
  EXPECT_LT(ey, 1e-2);
  EXPECT_LT(es, 1e-4);
  for (void* p : {static_cast<void*>(dproj), (void*)a.conv_w, (void*)a.dt_bias, (void*)a.a_neg, (void*)a.norm_w,
                  (void*)a.ring, (void*)a.S, (void*)a.cbuf, (void*)a.obuf, (void*)dy})
    cudaFree(p);
}

INSTANTIATE_TEST_SUITE_P(Scans, PrefillGdn,
                         ::testing::Values(cuda::kGdnScanPlain, cuda::kGdnScanWide),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(cuda::gdn_scan_name(i.param));
                         });

float round_f16(float x) {  // to the nearest fp16 value (ties to even), saturating at 65504
  if (!(std::fabs(x) >= 6.103515625e-05f)) return std::nearbyint(x * 16777216.f) / 16777216.f;
  int e = 0;
  const float m = std::frexp(x, &e);
  return std::clamp(std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11), -65504.f, 65504.f);
}

// fp16 Q, K and V (the reference rounds them the same way, as the cache stores K and V) and fp16 mma. precise:
// split-P P V and f32 output; the kernel then differs from the reference only by f32 summation order, exp2f and
// P's low-part rounding (2^-22): bound 1e-3 (the other path, fp16 P and bf16 output: 2e-2).
class PrefillAttn : public ::testing::TestWithParam<std::tuple<int, bool, bool>> {};

TEST_P(PrefillAttn, ChunksOverCacheMatchReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [hd, simple, precise] = GetParam();
  const int nq = 8, nkv = 2, rope = hd / 4, n1 = 40, n2 = 90, n = n1 + n2, max_ctx = 160;
  const int P = nq * 2 * hd + 2 * nkv * hd;
  std::mt19937 rng(5 + hd);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> proj(size_t(n) * P), qn(hd), kn(hd);
  for (auto& v : proj) v = u(rng) * 2.f;
  for (auto& v : qn) v = 1.f + 0.3f * u(rng);
  for (auto& v : kn) v = 1.f + 0.3f * u(rng);
  // reference: cache [T][nkv][hd] of fp16-rounded normed+roped k and v
  std::vector<float> kc(size_t(n) * nkv * hd), vc(kc.size()), want(size_t(n) * nq * hd), q(size_t(nq) * hd);
  for (int t = 0; t < n; ++t) {
    const float* pr = &proj[size_t(t) * P];
    for (int h = 0; h < nkv; ++h) {
      float* k = &kc[(size_t(t) * nkv + h) * hd];
      ref::rmsnorm(pr + nq * 2 * hd + h * hd, kn.data(), hd, 1e-6f, k);
      ref::rope_neox(k, rope, t, 1e7);
      for (int d = 0; d < hd; ++d) {
        k[d] = round_f16(k[d]);
        vc[(size_t(t) * nkv + h) * hd + d] = round_f16(pr[nq * 2 * hd + nkv * hd + h * hd + d]);
      }
    }
    for (int h = 0; h < nq; ++h) {
      ref::rmsnorm(pr + h * 2 * hd, qn.data(), hd, 1e-6f, &q[size_t(h) * hd]);
      ref::rope_neox(&q[size_t(h) * hd], rope, t, 1e7);
      for (int d = 0; d < hd; ++d)
        q[size_t(h) * hd + d] = round_f16(q[size_t(h) * hd + d]);
    }
    float* o = &want[size_t(t) * nq * hd];
    ref::attention_one(q.data(), kc.data(), vc.data(), t + 1, nq, nkv, hd, o);
    for (int h = 0; h < nq; ++h)
      for (int d = 0; d < hd; ++d) o[h * hd + d] *= ref::sigmoid(pr[h * 2 * hd + hd + d]);
  }
  float* dproj = dnew(proj);
  std::vector<uint16_t> cache(size_t(2) * nkv * max_ctx * hd, 0xFFFF);  // NaN where never written
  uint16_t* dkv = dnew(cache);
  uint16_t* dq = dnew(std::vector<uint16_t>(size_t(n) * nq * hd, 0xFFFF));
  uint16_t* dout = dnew(std::vector<uint16_t>(size_t(n) * nq * hd, 0xFFFF));
  cuda::AttnChunkArgs a;
  a.ldp = P; a.max_ctx = max_ctx; a.nq = nq; a.nkv = nkv; a.hd = hd; a.rope_dim = rope; a.theta = 1e7;
  a.eps = 1e-6f;
  a.q_norm = dnew(qn); a.k_norm = dnew(kn);
  a.kc = dkv; a.vc = dkv + size_t(nkv) * max_ctx * hd; a.qb = dq;
  float* dout_f = dnew(std::vector<float>(size_t(n) * nq * hd, NAN));
  a.precise = precise;
  a.proj = dproj; a.n = n1; a.pos0 = 0; a.out = dout;
  if (precise) a.out_f = dout_f;
  cuda::prefill_attn(a, nullptr, simple);
  a.proj = dproj + size_t(n1) * P; a.n = n2; a.pos0 = n1; a.out = dout + size_t(n1) * nq * hd;
  if (precise) a.out_f = dout_f + size_t(n1) * nq * hd;
  cuda::prefill_attn(a, nullptr, simple);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(want.size());
  if (precise) {
    got = down(dout_f, want.size());
  } else {
    auto oh = down(dout, want.size());
    for (size_t i = 0; i < oh.size(); ++i) got[i] = bf16_to_f32(oh[i]);
  }
  const double e = testmetrics::max_rel_err(got, want);
  std::printf("[ prefill attn hd %d %s %s ] %.2e\n", hd, simple ? "simple" : "flash", precise ? "precise" : "fp16 P", e);
  EXPECT_LT(e, precise ? 1e-3 : 2e-2);
  for (void* p : {static_cast<void*>(dproj), (void*)dkv, (void*)dq, (void*)dout, (void*)dout_f, (void*)a.q_norm,
                  (void*)a.k_norm})
    cudaFree(p);
}

INSTANTIATE_TEST_SUITE_P(Heads, PrefillAttn,
                         ::testing::Combine(::testing::Values(64, 256), ::testing::Bool(), ::testing::Bool()));

}  // namespace

#endif  // LILY_HAVE_CUDA
