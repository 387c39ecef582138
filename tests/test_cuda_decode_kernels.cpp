// CUDA decode-kernel tests against the reference kernels (src/cpu/ref_ops.h): MoE (router + routing + gate_up +
// down, vs a CPU reference MoE), decode attention (vs ref::attention_one at T = 1, 300, 5000 with the real head
// sizes) and the Gated DeltaNet step (vs conv_step + l2norm + gates + ref::gdn_step + gated_rmsnorm). Outputs are
// poisoned (NaN) first; NaN never passes. Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "cuda_aff_stack.h"
#include "cuda_test_buffers.h"
#include "test_metrics.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/decode/kernels.h"
#include "int8x_model.h"
#include "xq_image_host.h"

using namespace lily;

namespace {

using testcuda::AffStack;
using testcuda::Dev;
using testcuda::make_stack;
using testcuda::down;
using testcuda::xq_decode;
using testcuda::xq_encode;



// (int8 x, fused router + gate_up, E, expert intermediate I: 128 with a 192-row shared expert, or 512 with 512
// as the model has, where MoE down quantises its 4608-value act with 288 threads)
class CudaMoeDecode : public ::testing::TestWithParam<std::tuple<bool, bool, int, int>> {};

// Router + routing + gate_up + down vs the reference MoE; the 4-bit experts with f32 x and with int8 hi+lo x (dp4a);
// router and gate_up as two launches or as one (moe_route_gate_up, with its grid barrier); E = 64 and the model's 256
// (the fused kernel's top-k with 8 logits per lane) and 300 (16 per lane).
TEST_P(CudaMoeDecode, MatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const bool int8x = std::get<0>(GetParam()), fused = std::get<1>(GetParam());
  struct Restore {
    bool v = cuda::decode_int8_x();
    ~Restore() { cuda::set_decode_int8_x(v); }
  } restore;
  cuda::set_decode_int8_x(int8x);
  const int H = 512, E = std::get<2>(GetParam()), K = 8, I = std::get<3>(GetParam()), Is = I == 512 ? 512 : 192;
  const int g = I % 64 ? 32 : 64;  // groups dividing every expert size
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  AffStack router, shgw, gate, up, dn, sg, su, sd;
  make_stack(router, 1, E, H, 8, rng, dev, g);
  make_stack(shgw, 1, 1, H, 8, rng, dev, g);
  make_stack(gate, E, I, H, 4, rng, dev, g);
  make_stack(up, E, I, H, 4, rng, dev, g);
  make_stack(dn, E, H, I, 4, rng, dev, g);
  make_stack(sg, 1, Is, H, 4, rng, dev, g);
  make_stack(su, 1, Is, H, 4, rng, dev, g);
  make_stack(sd, 1, H, Is, 4, rng, dev, g);
  std::vector<float> x(H), nw(H);
  for (auto& v : x) v = 2.f * u(rng);
  for (auto& v : nw) v = 1.f + 0.3f * u(rng);
  // reference
  std::vector<float> xn(H), logits(E), want(x);
  float shg = 0.f;
  ref::rmsnorm(x.data(), nw.data(), H, 1e-6f, xn.data());
  ref::matvec(router.q[0], xn.data(), logits.data());
  ref::matvec(shgw.q[0], xn.data(), &shg);
  std::vector<int> idx(K);
  std::vector<float> wt(K);
  ref::route_topk(logits.data(), E, K, idx.data(), wt.data());
  // want: exact f32; want_q: the int8 activation model (int8x_model.h) — x quantised for gate/up, and the whole
  // act vector [k*I + Is] quantised in 32-element chunks for down, as the kernel does
  std::vector<float> want_q(x);
  auto expert_act = [&](const QMatrix& g, const QMatrix& uu, int inter, bool q) {
    std::vector<float> gv(inter), uv(inter);
    if (q) {
      testing_int8x::matvec_hilo(g, xn.data(), gv.data());
      testing_int8x::matvec_hilo(uu, xn.data(), uv.data());
    } else {
      ref::matvec(g, xn.data(), gv.data());
      ref::matvec(uu, xn.data(), uv.data());
    }
    for (int i = 0; i < inter; ++i) gv[i] = ref::silu(gv[i]) * uv[i];
    return gv;
  };
  auto moe = [&](bool q, std::vector<float>& out, bool q_down = true) {  // q_down: act quantised for down too
    std::vector<std::vector<float>> acts;
    for (int j = 0; j < K; ++j) acts.push_back(expert_act(gate.q[idx[j]], up.q[idx[j]], I, q));
    acts.push_back(expert_act(sg.q[0], su.q[0], Is, q));
    std::vector<float> all;
    for (auto& a : acts) all.insert(all.end(), a.begin(), a.end());
    if (q && q_down) all = testing_int8x::quant_hilo(all.data(), int(all.size()));
    size_t off = 0;
    for (int j = 0; j <= K; ++j) {
      const QMatrix& d = j < K ? dn.q[idx[j]] : sd.q[0];
      const int inter = j < K ? I : Is;
      std::vector<float> y(H);
      if (q && q_down) {
        testing_int8x::matvec_hilo_prequant(d, all.data() + off, acts[size_t(j)].data(), y.data());
      } else {
        ref::matvec(d, acts[size_t(j)].data(), y.data());
      }
      const float scale = j < K ? wt[size_t(j)] : ref::sigmoid(shg);
      for (int i = 0; i < H; ++i) out[size_t(i)] += scale * y[size_t(i)];
      off += size_t(inter);
    }
  };
  moe(false, want);
  if (int8x) moe(true, want_q);
  // device
  cuda::MoeArgs a;
  float* dx = dev.up(x);
  a.x = dx;
  a.norm_w = dev.up(nw);
  a.eps = 1e-6f;
  a.router = router.d.m;
  a.shg_w = shgw.d.m;
  a.logits = dev.poisoned(E);
  a.shg = dev.poisoned(1);
  a.route_done = reinterpret_cast<unsigned int*>(dev.up(std::vector<uint32_t>(8, 0)));
  a.early_route = fused ? 1 : 0;  // down reads the routing from the fused kernel's flag
  a.E = E;
  a.k = K;
  a.gate = gate.d;
  a.up = up.d;
  a.down = dn.d;
  a.sh_gate = sg.d.m;
  a.sh_up = su.d.m;
  a.sh_down = sd.d.m;
  a.act = dev.poisoned(size_t(K) * I + Is);
  a.route_idx = reinterpret_cast<int32_t*>(dev.poisoned(K));
  a.route_w = dev.poisoned(K);
  a.out = dx;
  for (int rep = 0; rep < 3; ++rep) {  // again: the router's counter / the barrier must reset themselves
    CK(cudaMemcpy(dx, x.data(), H * 4, cudaMemcpyHostToDevice));
    if (fused) {
      cuda::moe_route_gate_up(a, nullptr, true);
    } else {
      cuda::moe_router(a, nullptr, true);
      cuda::moe_gate_up(a, nullptr, true);
    }
    cuda::moe_down(a, nullptr, true);
    CK(cudaDeviceSynchronize());
    std::vector<int32_t> gidx(K);
    CK(cudaMemcpy(gidx.data(), a.route_idx, K * 4, cudaMemcpyDeviceToHost));
    for (int j = 0; j < K; ++j) EXPECT_EQ(gidx[j], idx[j]) << "rep " << rep << " slot " << j;
    const std::vector<uint32_t> ctr = down(a.route_done, 8);  // counters left zeroed (the barrier generation may not)
    for (int i : {0, 2, 3, 4, 5, 6, 7}) EXPECT_EQ(ctr[size_t(i)], 0u) << "rep " << rep << " word " << i;
    EXPECT_LT(testmetrics::rms_rel_err(down(a.route_w, K), wt), 1e-5);
    EXPECT_LT(testmetrics::rms_rel_err(down(a.logits, E), logits), 1e-5);
    if (int8x) {
      // the kernel implements the int8 model up to f32 rounding; the model itself (activations to ~16 bits, error
      // <= max|x of the chunk| / 64516 per element) sits 7.6e-5 from exact f32 here: the heavy-tailed SiLU*mul
      // products have chunk maxima well above their RMS
      EXPECT_LT(testmetrics::rms_rel_err(down(dx, H), want_q), 1e-5) << "rep " << rep;
      EXPECT_LT(testmetrics::rms_rel_err(down(dx, H), want), 2e-4) << "rep " << rep;
    } else {
      EXPECT_LT(testmetrics::rms_rel_err(down(dx, H), want), 1e-5) << "rep " << rep;
    }
  }
  if (!fused || E > 256) return;
  // The router-from-y form (MoeArgs::pre): the logits before the RMS factor, W_r (nw * x), given as 3 partial
  // vectors (summed in order by the kernel, no router rows, no barrier); the kernel scales by the factor of x.
  std::vector<float> xs(H), raw(E);
  for (int i = 0; i < H; ++i) xs[size_t(i)] = x[size_t(i)] * nw[size_t(i)];
  ref::matvec(router.q[0], xs.data(), raw.data());
  float raw_shg = 0.f;
  ref::matvec(shgw.q[0], xs.data(), &raw_shg);
  raw.push_back(raw_shg);  // element E
  std::vector<float> pre(size_t(E + 1) * cuda::kMoePreStride, 0.f);
  auto part = [&](int e, int p) -> float& { return pre[size_t(e) * cuda::kMoePreStride + p]; };
  for (int e = 0; e <= E; ++e) {
    part(e, 0) = 0.75f * raw[size_t(e)];
    part(e, 1) = raw[size_t(e)] - part(e, 0);
    part(e, 3) = 1e30f;  // past pre_parts: never read
  }
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const float r = 1.f / std::sqrt(float(ss / H) + 1e-6f);
  std::vector<float> pl(E);  // what the kernel ranks: r * ((p0 + p1) + p2)
  for (int e = 0; e < E; ++e) pl[size_t(e)] = r * ((part(e, 0) + part(e, 1)) + part(e, 2));
  std::vector<int> pidx(K);
  std::vector<float> pwt(K);
  ref::route_topk(pl.data(), E, K, pidx.data(), pwt.data());
  EXPECT_EQ(pidx, idx) << "the split logits rank as the reference's";
  // the same parts part-major (MoeArgs::pre_ps): part p of element e at p * kMoePrePartStride + e
  std::vector<float> pre_pm(size_t(cuda::kMoePreMaxParts) * cuda::kMoePrePartStride, 1e30f);
  for (int e = 0; e <= E; ++e)
    for (int p = 0; p < 3; ++p) pre_pm[size_t(p) * cuda::kMoePrePartStride + size_t(e)] = part(e, p);
  float* const d_pre = dev.up(pre);
  float* const d_pre_pm = dev.up(pre_pm);
  a.pre_parts = 3;
  a.logits = nullptr;  // not read in this form
  for (int rep = 0; rep < 4; ++rep) {  // reps 2, 3: part-major
    const bool pm = rep >= 2;
    a.pre = pm ? d_pre_pm : d_pre;
    a.pre_es = pm ? 1 : cuda::kMoePreStride;
    a.pre_ps = pm ? cuda::kMoePrePartStride : 1;
    CK(cudaMemcpy(dx, x.data(), H * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(a.shg, 0xFF, 4));
    cuda::moe_route_gate_up(a, nullptr, true);
    cuda::moe_down(a, nullptr, true);
    CK(cudaDeviceSynchronize());
    std::vector<int32_t> gidx(K);
    CK(cudaMemcpy(gidx.data(), a.route_idx, K * 4, cudaMemcpyDeviceToHost));
    for (int j = 0; j < K; ++j) EXPECT_EQ(gidx[j], pidx[j]) << "pre rep " << rep << " slot " << j;
    EXPECT_LT(testmetrics::rms_rel_err(down(a.route_w, K), wt), 1e-5) << "pre rep " << rep;
    EXPECT_LT(testmetrics::rms_rel_err(down(a.shg, 1), {r}), 1e-6) << "pre rep " << rep;  // the RMS factor
    const std::vector<uint32_t> ctr = down(a.route_done, 8);
    for (int i : {0, 2, 3, 4, 5, 6, 7}) EXPECT_EQ(ctr[size_t(i)], 0u) << "pre rep " << rep << " word " << i;
    EXPECT_LT(testmetrics::rms_rel_err(down(dx, H), int8x ? want_q : want), 1e-5) << "pre rep " << rep;
  }
}

INSTANTIATE_TEST_SUITE_P(ActivationsLaunchesExperts, CudaMoeDecode,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Values(64, 256, 300),
                                            ::testing::Values(128)));
INSTANTIATE_TEST_SUITE_P(ModelExpertSizes, CudaMoeDecode,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(true), ::testing::Values(256),
                                            ::testing::Values(512)));
// An expert size that is not a power of two (96 rows, 3 chunks per down row, groups of 32).
INSTANTIATE_TEST_SUITE_P(OddExpertSize, CudaMoeDecode,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Values(64),
                                            ::testing::Values(96)));

class CudaAttnDecode : public ::testing::TestWithParam<int> {};

TEST_P(CudaAttnDecode, MatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int T = GetParam(), nq = 16, nkv = 2, hd = 256, rope = 64, max_ctx = T + 3, layer = 1, nlayer = 2;
  const double theta = 1e7;
  std::mt19937 rng(1000 + T);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int pos = T - 1;
  std::vector<float> qg(size_t(nq) * 2 * hd), k(nkv * hd), v(nkv * hd), qn(hd), kn(hd);
  for (auto& x : qg) x = u(rng);
  for (auto& x : k) x = u(rng);
  for (auto& x : v) x = u(rng);
  for (auto& x : qn) x = 1.f + 0.2f * u(rng);
  for (auto& x : kn) x = 1.f + 0.2f * u(rng);
  // cache [layer][K/V][nkv][max_ctx][hd] fp16, positions < pos random
  std::vector<uint16_t> kv(size_t(nlayer) * 2 * nkv * max_ctx * hd, 0);
  auto at = [&](int l, int kvsel, int h, int t) { return ((size_t(l) * 2 + kvsel) * nkv + h) * max_ctx * hd + size_t(t) * hd; };
  for (int l = 0; l < nlayer; ++l)
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < nkv; ++h)
        for (int t = 0; t < pos; ++t)
          for (int d = 0; d < hd; ++d) kv[at(l, s, h, t) + d] = f32_to_f16(2.f * u(rng));
  // reference: q/k norm + rope, new k/v rounded to fp16 like the cache
  std::vector<float> q(size_t(nq) * hd), kc(size_t(T) * nkv * hd), vc(size_t(T) * nkv * hd), want(size_t(nq) * hd);
  for (int h = 0; h < nq; ++h) {
    ref::rmsnorm(&qg[size_t(h) * 2 * hd], qn.data(), hd, 1e-6f, &q[size_t(h) * hd]);
    ref::rope_neox(&q[size_t(h) * hd], rope, pos, theta);
  }
  for (int h = 0; h < nkv; ++h) {
    std::vector<float> kk(hd);
    ref::rmsnorm(&k[size_t(h) * hd], kn.data(), hd, 1e-6f, kk.data());
    ref::rope_neox(kk.data(), rope, pos, theta);
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < hd; ++d) {
        const size_t o = (size_t(t) * nkv + h) * hd + d;
        kc[o] = t < pos ? f16_to_f32(kv[at(layer, 0, h, t) + d]) : f16_to_f32(f32_to_f16(kk[d]));
        vc[o] = t < pos ? f16_to_f32(kv[at(layer, 1, h, t) + d]) : f16_to_f32(f32_to_f16(v[h * hd + d]));
      }
  }
  ref::attention_one(q.data(), kc.data(), vc.data(), T, nq, nkv, hd, want.data());
  for (int h = 0; h < nq; ++h)
    for (int d = 0; d < hd; ++d) want[size_t(h) * hd + d] *= ref::sigmoid(qg[size_t(h) * 2 * hd + hd + d]);
  // device
  Dev dev;
  cuda::StepCtl ctl;
  ctl.kv = dev.up(kv);
  ctl.pos = pos;
  ctl.max_ctx = max_ctx;
  cuda::StepCtl* dctl = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&dctl), sizeof(ctl)));
  dev.p.push_back(dctl);
  CK(cudaMemcpy(dctl, &ctl, sizeof(ctl), cudaMemcpyHostToDevice));
  cuda::AttnArgs a;
  a.q = dev.up(qg);
  a.k = dev.up(k);
  a.v = dev.up(v);
  a.q_norm = dev.up(qn);
  a.k_norm = dev.up(kn);
  a.layer = layer;
  a.nq = nq;
  a.nkv = nkv;
  a.hd = hd;
  a.rope_dim = rope;
  a.theta = theta;
  a.eps = 1e-6f;
  a.part = dev.poisoned(size_t(nkv) * cuda::kAttnPartSlots * (8 * hd + 16));
  a.out = dev.poisoned(size_t(nq) * hd);
  a.ctl = dctl;
  for (int levels : {0, 1, 2}) {  // the spread merge (default), one level, groups then groups of groups
    a.merge_levels = levels;
    for (int rep = 0; rep < 2; ++rep) {  // twice: the merge counters must reset themselves
      CK(cudaMemset(a.out, 0xFF, size_t(nq) * hd * 4));
      cuda::attn_decode(a, nullptr, true);
      CK(cudaDeviceSynchronize());
      // f32 online softmax over T positions vs the reference: 2e-5 up to 5000; H200 measured 4.1e-5 at T = 20000
      EXPECT_LT(testmetrics::rms_rel_err(down(a.out, size_t(nq) * hd), want), T > 5000 ? 8e-5 : 2e-5)
          << "T=" << T << " merge " << levels << " rep " << rep;
      const std::vector<cuda::StepCtl> c = down(dctl, 1);  // counters left zeroed
      for (unsigned v : c[0].attn_done) EXPECT_EQ(v, 0u) << "merge " << levels;
      for (unsigned v : c[0].attn_gdone) EXPECT_EQ(v, 0u) << "merge " << levels;
    }
  }
  // the new k/v were appended at pos
  std::vector<uint16_t> kv2(kv.size());
  CK(cudaMemcpy(kv2.data(), ctl.kv, kv.size() * 2, cudaMemcpyDeviceToHost));
  for (int d = 0; d < hd; ++d) {
    EXPECT_EQ(f16_to_f32(kv2[at(layer, 1, 1, pos) + d]), f16_to_f32(f32_to_f16(v[hd + d])));
    EXPECT_NEAR(f16_to_f32(kv2[at(layer, 0, 0, pos) + d]), kc[(size_t(pos) * nkv + 0) * hd + d], 2e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, CudaAttnDecode, ::testing::Values(1, 129, 300, 800, 5000, 20000));

// Forms: 0 one 1024-thread block per head; 1 the split form (Dv / 32 blocks per head, y without the RMS factor +
// per-part sums of o^2, finished here as the out_proj GEMV's HeadNorm does); 2 the split form writing y as an XQ
// image (decoded here; its chunk sums checked against the decoded values); 3 form 2 with router-from-y's A rows by
// blocks of the same launch (GdnArgs::ra_*: 257 int16 rows of 2048 columns on a raw x), against a host double dot.
class CudaGdnStep : public ::testing::TestWithParam<int> {};

TEST_P(CudaGdnStep, MatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const bool split = GetParam() >= 1, yq = GetParam() >= 2, ra = GetParam() >= 3;
  const int Hk = 16, Hv = 32, Dk = 128, Dv = 128, K = 4, layer = 1, nlayer = 2, pos = 9;
  const int KD = Hk * Dk, C = 2 * KD + Hv * Dv;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> qkv(C), z(Hv * Dv), b(Hv), a(Hv), convw(size_t(C) * K), dtb(Hv), aneg(Hv), nw(Dv);
  for (auto& x : qkv) x = u(rng);
  for (auto& x : z) x = u(rng);
  for (auto& x : b) x = u(rng);
  for (auto& x : a) x = u(rng);
  for (auto& x : convw) x = 0.5f * u(rng);
  for (auto& x : dtb) x = 0.5f * u(rng);
  for (auto& x : aneg) x = -0.5f - 0.5f * std::fabs(u(rng));
  for (auto& x : nw) x = 1.f + 0.2f * u(rng);
  std::vector<float> S(size_t(nlayer) * Hv * Dv * Dk), ring(size_t(nlayer) * K * C);
  for (auto& x : S) x = 0.1f * u(rng);
  for (auto& x : ring) x = u(rng);
  // reference
  std::vector<float> state(size_t(K - 1) * C), conv(C);
  for (int tap = 0; tap < K - 1; ++tap)  // oldest first: position pos-(K-1)+tap lives in slot (that) % K
    for (int ch = 0; ch < C; ++ch) state[size_t(tap) * C + ch] = ring[size_t(layer) * K * C + cuda::conv_ring_at(ch, K, pos - (K - 1) + tap)];
  ref::conv_step(state.data(), convw.data(), qkv.data(), C, K, conv.data());
  float* q = conv.data();
  float* kk = q + KD;
  float* vv = kk + KD;
  auto l2 = [](float* p, int n, float scale) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(p[i]) * p[i];
    const float inv = float(1.0 / std::sqrt(ss + 1e-6)) * scale;
    for (int i = 0; i < n; ++i) p[i] *= inv;
  };
  for (int h = 0; h < Hk; ++h) {
    l2(q + h * Dk, Dk, 1.f / std::sqrt(float(Dk)));
    l2(kk + h * Dk, Dk, 1.f);
  }
  std::vector<float> g(Hv), beta(Hv), o(Hv * Dv), want(Hv * Dv);
  for (int j = 0; j < Hv; ++j) {
    beta[j] = ref::sigmoid(b[j]);
    g[j] = aneg[j] * ref::softplus(a[j] + dtb[j]);
  }
  std::vector<float> Sref(S.begin() + size_t(layer) * Hv * Dv * Dk, S.begin() + size_t(layer + 1) * Hv * Dv * Dk);
  ref::gdn_step(Sref.data(), q, kk, vv, g.data(), beta.data(), Hk, Hv, Dk, Dv, o.data());
  ref::gated_rmsnorm(o.data(), z.data(), nw.data(), Hv, Dv, 1e-6f, want.data());
  // device
  Dev dev;
  cuda::StepCtl ctl;
  ctl.S = dev.up(S);
  ctl.conv = dev.up(ring);
  ctl.pos = pos;
  cuda::StepCtl* dctl = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&dctl), sizeof(ctl)));
  dev.p.push_back(dctl);
  CK(cudaMemcpy(dctl, &ctl, sizeof(ctl), cudaMemcpyHostToDevice));
  cuda::GdnArgs ga;
  ga.qkv = dev.up(qkv);
  ga.z = dev.up(z);
  ga.b = dev.up(b);
  ga.a = dev.up(a);
  ga.conv_w = dev.up(convw);
  ga.dt_bias = dev.up(dtb);
  ga.a_neg = dev.up(aneg);
  ga.norm_w = dev.up(nw);
  ga.layer = layer;
  ga.Hk = Hk;
  ga.Hv = Hv;
  ga.Dk = Dk;
  ga.Dv = Dv;
  ga.K = K;
  ga.eps = 1e-6f;
  ga.y = dev.poisoned(size_t(Hv) * Dv);
  ga.ctl = dctl;
  const int P = cuda::gdn_split_parts(Dv);
  if (split) ga.hss = dev.poisoned(size_t(Hv) * P);
  const int n = Hv * Dv;
  if (yq) ga.yq = dev.poisoned<uint8_t>(cuda::xq_image_bytes(n));
  const int RR = 257, RC = 2048, RS = 3;  // A rows, columns, output stride
  std::vector<uint16_t> ram(size_t(RR) * RC);
  std::vector<float> rax(RC), ras(RR), ra_want(RR);
  if (ra) {
    for (auto& v : ram) v = uint16_t(rng());
    for (auto& v : rax) v = 2.f * u(rng);
    for (auto& v : ras) v = (1.f + 0.5f * u(rng)) / 32768.f;
    for (int r = 0; r < RR; ++r) {
      double acc = 0;
      for (int c = 0; c < RC; ++c) acc += double(int16_t(ram[size_t(r) * RC + c])) * rax[size_t(c)];
      ra_want[size_t(r)] = float(acc * ras[size_t(r)]);
    }
    ga.ra_m = dev.up(ram);
    ga.ra_scale = dev.up(ras);
    ga.ra_x = dev.up(rax);
    ga.ra_out = dev.poisoned(size_t(RR) * RS);
    ga.ra_rows = RR;
    ga.ra_cols = RC;
    ga.ra_stride = RS;
  }
  cuda::gdn_decode(ga, nullptr, true);
  CK(cudaDeviceSynchronize());
  if (ra) {
    const std::vector<float> got = down(ga.ra_out, size_t(RR) * RS);
    std::vector<float> a_got(RR);
    for (int r = 0; r < RR; ++r) {
      a_got[size_t(r)] = got[size_t(r) * RS];
      ASSERT_TRUE(std::isnan(got[size_t(r) * RS + 1]) && std::isnan(got[size_t(r) * RS + 2])) << "row " << r;
    }
    EXPECT_LT(testmetrics::rms_rel_err(a_got, ra_want), 1e-5);
  }
  std::vector<float> y = down(ga.y, size_t(n));
  if (yq) {
    std::vector<float> xs32;
    xq_decode(down(static_cast<uint8_t*>(ga.yq), cuda::xq_image_bytes(n)), n, y, xs32);
    for (int c = 0; c < n / 32; ++c) {
      float sum = 0.f, amax = 0.f;
      for (int e = 0; e < 32; ++e) {
        sum += y[size_t(c) * 32 + e];
        amax = std::max(amax, std::fabs(y[size_t(c) * 32 + e]));
      }
      ASSERT_NEAR(xs32[size_t(c)], sum, 1e-5f + 32.f * amax / 64516.f) << "chunk " << c;
    }
  }
  if (split) {
    ASSERT_EQ(P, Dv / 32);
    const std::vector<float> ss = down(ga.hss, size_t(Hv) * P);
    for (int j = 0; j < Hv; ++j) {
      float t = 0.f;
      for (int p = 0; p < P; ++p) t += ss[size_t(j) * P + p];
      const float r = 1.f / std::sqrt(t / float(Dv) + 1e-6f);
      for (int v = 0; v < Dv; ++v) y[size_t(j) * Dv + v] *= r;
    }
  }
  EXPECT_LT(testmetrics::rms_rel_err(y, want), 1e-4);
  const std::vector<float> S2 = down(ctl.S + size_t(layer) * Hv * Dv * Dk, size_t(Hv) * Dv * Dk);
  EXPECT_LT(testmetrics::rms_rel_err(S2, Sref), 1e-5);
  const std::vector<float> rl = down(ctl.conv + size_t(layer) * K * C, size_t(K) * C);
  std::vector<float> ring2(C);
  for (int ch = 0; ch < C; ++ch) ring2[ch] = rl[cuda::conv_ring_at(ch, K, pos)];
  EXPECT_LT(testmetrics::rms_rel_err(ring2, qkv), 1e-7);  // this position's raw inputs stored in its ring slot
  if (yq) {  // the image's codes and scales are exactly the host encoder's of the f32 form of the same step
    const std::vector<uint8_t> img = down(static_cast<uint8_t*>(ga.yq), cuda::xq_image_bytes(n));
    CK(cudaMemcpy(ctl.S, S.data(), S.size() * 4, cudaMemcpyHostToDevice));  // the same step again
    CK(cudaMemcpy(ctl.conv, ring.data(), ring.size() * 4, cudaMemcpyHostToDevice));
    ga.yq = nullptr;
    cuda::gdn_decode(ga, nullptr, true);
    CK(cudaDeviceSynchronize());
    const std::vector<uint8_t> want_img = xq_encode(down(ga.y, size_t(n)));
    ASSERT_EQ(img.size(), want_img.size());
    const size_t codes = size_t(n) * 2 + size_t(n / 32) * 4;  // xh, xl, d; then xs32 (sums in another order)
    for (size_t i = 0; i < codes; ++i) ASSERT_EQ(int(img[i]), int(want_img[i])) << "byte " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, CudaGdnStep, ::testing::Values(0, 1, 2, 3));

TEST(CudaGdnStepArgs, XqImageNeedsSplitForm) {  // no device needed: checked before any CUDA call
  cuda::GdnArgs ga;
  ga.Hk = 16; ga.Hv = 32; ga.Dk = 128; ga.Dv = 128; ga.K = 4;
  uint8_t img = 0;
  ga.yq = &img;  // never written: rejected before any launch
  EXPECT_THROW(cuda::gdn_decode(ga, nullptr, false), lily::Error);
}

TEST(CudaGdnStepArgs, ARowsNeedRowsAndWholeChunks) {  // no device needed: checked before any CUDA call
  cuda::GdnArgs ga;
  ga.Hk = 16; ga.Hv = 32; ga.Dk = 128; ga.Dv = 128; ga.K = 4;
  float hss = 0.f, out = 0.f;
  ga.ra_rows = 257;
  ga.ra_cols = 2048;
  ga.ra_out = &out;  // no rows, scales or x
  EXPECT_THROW(cuda::gdn_decode(ga, nullptr, false), lily::Error);  // and no split form
  ga.hss = &hss;
  EXPECT_THROW(cuda::gdn_decode(ga, nullptr, false), lily::Error);
  alignas(16) static const uint16_t m[256] = {};
  alignas(16) static const float x[2304] = {};
  ga.ra_m = m;
  ga.ra_scale = x;
  ga.ra_x = x;
  ga.ra_cols = 2304;  // over 2048 columns
  EXPECT_THROW(cuda::gdn_decode(ga, nullptr, false), lily::Error);
  ga.ra_cols = 300;  // not whole 256-column chunks
  EXPECT_THROW(cuda::gdn_decode(ga, nullptr, false), lily::Error);
}

}  // namespace

#endif  // LILY_HAVE_CUDA
