// Every CUDA kernel family that reads weights, on the formats the device keeps as codes with f32 scales and no bias
// (kernels.h kF8: FP8 e4m3 with 128x128 block scales, f32 or bf16; kQ6: GGUF Q6_K; cuda_code8_mats.h), uploaded
// through the backend's own path, against the CPU reference on the source matrices (the device forms are exact):
// decode GEMV, lm_head + argmax, embedding rows (decode and prefill), the prefill GEMMs (simple, mma.sync, wgmma;
// bf16, fp16 and split operands; dense store and grouped SiLU * up), and the MoE decode (router in bf16; experts in
// the form; down projections in the form beside 4-bit affine gate/up, as Q4_K_M files keep Q6_K down projections, or
// in bf16; two launches and fused; f32 and int8 x). Bounds: those of test_cuda_affine_forms.cpp; kQ6 on int8 x (XQ,
// as the 4-bit forms) also against the int8 activation model (int8x_model.h). Also an affine 4-bit matrix widened to
// 8-bit codes at upload. Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/decode/kernels.h"
#include "cuda/prefill/prefill.h"
#include "cuda_affine_mats.h"
#include "cuda_code8_mats.h"
#include "cuda_test_buffers.h"
#include "int8x_model.h"
#include "test_metrics.h"

using namespace lily;
using testcuda::Code8;
using testcuda::Code8Stack;
using testcuda::Dev;
using testcuda::down;
using testcuda::make_code8;

namespace {

struct Int8xRestore {
  bool v = cuda::decode_int8_x();
  ~Int8xRestore() { cuda::set_decode_int8_x(v); }
};

class CudaCode8Forms : public ::testing::TestWithParam<Code8> {};

TEST_P(CudaCode8Forms, UploadKeepsTheCodes) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(3);
  Dev dev;
  Code8Stack m;
  make_code8(m, 1, 300, 512, GetParam(), rng, dev);
  const bool q6 = GetParam() == Code8::Q6K;
  EXPECT_EQ(m.d.m.fmt, q6 ? cuda::kQ6 : cuda::kF8);
  EXPECT_EQ(cuda::dmat_w_bytes(m.d.m), size_t(300) * 512);  // one byte per weight (bf16 would be two)
  EXPECT_EQ(cuda::dmat_sb_words(m.d.m), q6 ? size_t(0) : size_t(300) * 4);  // kQ6: the scales are in the chunks
  EXPECT_EQ(m.d.m.group, q6 ? 16 : 128);
}

// y = W x for a matrix the device keeps exactly (w = s * code), with x through the int8 activation model: the kQ6
// int8-x path up to f32 rounding.
std::vector<float> matvec_int8x(const QMatrix& m, const std::vector<float>& x) {
  const std::vector<float> xq = testing_int8x::quant_hilo(x.data(), int(x.size()));
  std::vector<float> y(static_cast<size_t>(m.rows));
  ref::matvec(m, xq.data(), y.data());
  return y;
}

// GEMV (two segments, the second accumulating, RMSNorm prologue; 2048 and 4096 columns) within 1e-5; kQ6 on int8 x
// within 2e-4 (the 4-bit forms' bound) and within 1e-5 of the int8 activation model.
TEST_P(CudaCode8Forms, GemvMatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xRestore restore;
  for (const int cols : {2048, 4096})
    for (const bool int8x : {false, true}) {
      if (int8x && GetParam() != Code8::Q6K) continue;
      cuda::set_decode_int8_x(int8x);
      SCOPED_TRACE(std::string(testcuda::code8_name(GetParam())) + " cols " + std::to_string(cols) +
                   (int8x ? " int8 x" : " f32 x"));
      std::mt19937 rng(5 + cols + int(GetParam()));
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      Dev dev;
      Code8Stack a, b;
      make_code8(a, 1, 300, cols, GetParam(), rng, dev);
      make_code8(b, 1, 77, cols, GetParam(), rng, dev);
      std::vector<float> x(static_cast<size_t>(cols)), nw(static_cast<size_t>(cols)), y1(77), xn(static_cast<size_t>(cols));
      for (auto& v : x) v = 3.f * u(rng);
      for (auto& v : nw) v = 1.f + 0.5f * u(rng);
      for (auto& v : y1) v = u(rng);
      ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
      std::vector<float> want0(300), want1(77);
      ref::matvec(a.src[0], xn.data(), want0.data());
      ref::matvec(b.src[0], xn.data(), want1.data());
      for (int i = 0; i < 77; ++i) want1[size_t(i)] += y1[size_t(i)];
      float* dy0 = dev.poisoned(300);
      float* dy1 = dev.up(y1);
      cuda::GemvSeg segs[2] = {{a.d.m, dy0, 0}, {b.d.m, dy1, 1}};
      cuda::gemv(segs, 2, dev.up(x), dev.up(nw), 1e-6f, nullptr, false);
      CK(cudaDeviceSynchronize());
      const double e0 = testmetrics::rms_rel_err(down(dy0, 300), want0);
      EXPECT_LT(e0, int8x ? 2e-4 : 1e-5);
      EXPECT_LT(testmetrics::rms_rel_err(down(dy1, 77), want1), int8x ? 2e-4 : 1e-5);
      if (int8x) {
        std::vector<float> q1 = matvec_int8x(b.src[0], xn);
        for (int i = 0; i < 77; ++i) q1[size_t(i)] += y1[size_t(i)];
        EXPECT_LT(testmetrics::rms_rel_err(down(dy0, 300), matvec_int8x(a.src[0], xn)), 1e-5);
        EXPECT_LT(testmetrics::rms_rel_err(down(dy1, 77), q1), 1e-5);
      }
      std::printf("[ gemv %s cols %d %s ] %.2e\n", testcuda::code8_name(GetParam()), cols, int8x ? "int8x" : "f32x",
                  e0);
    }
}

// lm_head + argmax (kQ6 on f32 and int8 x, the GEMV's bounds), and the embedding row kernels of decode and prefill
// (exact dequantisation: 1e-6).
TEST_P(CudaCode8Forms, LmHeadAndEmbedMatchReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xRestore restore;
  for (const bool int8x : {false, true}) {
    if (int8x && GetParam() != Code8::Q6K) continue;
    cuda::set_decode_int8_x(int8x);
    SCOPED_TRACE(int8x ? "int8 x" : "f32 x");
    std::mt19937 rng(17 + int(GetParam()));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    Dev dev;
    const int rows = 5003, cols = 2048;
    Code8Stack m;
    make_code8(m, 1, rows, cols, GetParam(), rng, dev);
    std::vector<float> x(static_cast<size_t>(cols)), nw(static_cast<size_t>(cols)), xn(static_cast<size_t>(cols)), want(static_cast<size_t>(rows));
    for (auto& v : x) v = 3.f * u(rng);
    for (auto& v : nw) v = 1.f + 0.5f * u(rng);
    ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
    ref::matvec(m.src[0], xn.data(), want.data());
    float* dl = dev.poisoned(static_cast<size_t>(rows));
    int32_t* din = dev.up(std::vector<int32_t>{7, -1, -1, -1});
    int32_t* dout = dev.up(std::vector<int32_t>(4, -1));
    cuda::StepCtl c;
    c.n_given = 1;
    cuda::StepCtl* dc = dev.up(std::vector<cuda::StepCtl>{c});
    cuda::lm_head_argmax(m.d.m, dev.up(x), dev.up(nw), 1e-6f, dl, din, dout, dc, nullptr, false);
    CK(cudaDeviceSynchronize());
    const std::vector<float> got = down(dl, size_t(rows));
    EXPECT_LT(testmetrics::rms_rel_err(got, want), int8x ? 2e-4 : 1e-5);
    if (int8x) {
      EXPECT_LT(testmetrics::rms_rel_err(got, matvec_int8x(m.src[0], xn)), 1e-5);
    }
    int best = 0;
    for (int i = 1; i < rows; ++i)
      if (got[size_t(i)] > got[size_t(best)]) best = i;
    EXPECT_EQ(down(dout, 4)[0], best);
    const std::vector<int32_t> ids = {3, 4999, 0, 130};
    float* dx = dev.poisoned(size_t(cols) * ids.size());
    cuda::prefill_embed(m.d.m, dev.up(ids), int(ids.size()), dx, nullptr);
    CK(cudaDeviceSynchronize());
    const std::vector<float> gx = down(dx, size_t(cols) * ids.size());
    std::vector<float> wx(gx.size());
    for (size_t t = 0; t < ids.size(); ++t) dequant_row(m.src[0], ids[t], wx.data() + t * size_t(cols));
    EXPECT_LT(testmetrics::max_rel_err(gx, wx), 1e-6) << "prefill embed";
    float* de = dev.poisoned(static_cast<size_t>(cols));
    cuda::embed(m.d.m, din, dc, de, nullptr, false);  // cursor 1: in_ids[1] = the argmax fed forward
    CK(cudaDeviceSynchronize());
    std::vector<float> we(static_cast<size_t>(cols));
    dequant_row(m.src[0], best, we.data());
    EXPECT_LT(testmetrics::max_rel_err(down(de, size_t(cols)), we), 1e-6) << "decode embed";
  }
}

// Prefill GEMMs: dense store (M 150, N 200, K 512) and grouped SiLU * up over two experts (tiles of at most 64 rows),
// on every path and operand precision; the simple path within 1e-4, the tensor-core kernels within 1e-2 of max |y|
// (the bounds of PrefillGemm.DenseAddAndGroupedSiluMulMatchReference).
TEST_P(CudaCode8Forms, PrefillGemmMatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(29 + int(GetParam()));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  const int M = 150, N = 200, K = 512;
  Code8Stack w, gate, up;
  make_code8(w, 1, N, K, GetParam(), rng, dev);
  make_code8(gate, 2, N, K, GetParam(), rng, dev);
  make_code8(up, 2, N, K, GetParam(), rng, dev);
  // A in each precision's operand form; a (f32) the values the operands hold
  std::vector<float> a(size_t(M) * K);
  std::vector<uint16_t> ab(a.size()), ah(a.size()), al(a.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    ab[i] = f32_to_bf16(u(rng));
    a[i] = bf16_to_f32(ab[i]);
    ah[i] = f32_to_f16(a[i]);  // exact: a bf16 value in [-1, 1] has 8 significant bits
  }
  std::vector<float> want(size_t(M) * N), g0(size_t(M) * N), u0(size_t(M) * N), g1(size_t(M) * N), u1(size_t(M) * N);
  ref::matmul(w.src[0], a.data(), M, want.data());
  ref::matmul(gate.src[0], a.data(), M, g0.data());
  ref::matmul(up.src[0], a.data(), M, u0.data());
  ref::matmul(gate.src[1], a.data(), M, g1.data());
  ref::matmul(up.src[1], a.data(), M, u1.data());
  const int split = 100;  // rows [0, 100) to expert 0, the rest to expert 1
  std::vector<float> want_su(size_t(M) * N);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) {
      const size_t i = size_t(r) * N + size_t(c);
      want_su[i] = r < split ? ref::silu(g0[i]) * u0[i] : ref::silu(g1[i]) * u1[i];
    }
  const std::vector<int32_t> tiles = {0, 0, 64, 0, 64, split, 1, split, M};
  const std::vector<float> ones(size_t(M), 1.f);
  for (const int prec : {int(cuda::kPrecBF16), int(cuda::kPrecFP16), int(cuda::kPrecSplit)})
    for (const int path : {0, int(cuda::kGemmKernelV2), int(cuda::kGemmKernelWG)}) {
      if (path == cuda::kGemmKernelWG && (!cuda::prefill_gemm_wg_available() || prec == cuda::kPrecSplit)) continue;
      const std::string what = std::string(testcuda::code8_name(GetParam())) + " prec " + std::to_string(prec) +
                               " path " + std::to_string(path);
      SCOPED_TRACE(what);
      cuda::GemmArgs g;
      g.A = dev.up(prec == cuda::kPrecBF16 ? ab : ah);
      g.prec = prec;
      if (prec != cuda::kPrecBF16) g.a_scale = dev.up(ones);
      if (prec == cuda::kPrecSplit) g.A_lo = dev.up(al);
      g.lda = K;
      g.M = M;
      g.W0 = w.d.m;
      g.C = dev.poisoned(want.size());
      g.ldc = N;
      g.kernel = path;
      cuda::prefill_gemm(g, cuda::kGemmStore, nullptr, path == 0);
      CK(cudaDeviceSynchronize());
      const double e = testmetrics::max_rel_err(down(g.C, want.size()), want);
      // grouped SiLU * up: expert e's gate / up at stride
      cuda::GemmArgs s = g;
      s.W0 = gate.d.m;
      s.W1 = up.d.m;
      s.w_stride = gate.d.w_stride;
      s.sb_stride = gate.d.sb_stride;
      s.tiles = dev.up(tiles);
      s.n_tiles = dev.up(std::vector<int32_t>{3});
      s.max_tiles = 3;
      s.tile_m = cuda::kGemmTileM;
      s.C = dev.poisoned(want_su.size());
      cuda::prefill_gemm(s, cuda::kGemmSiluMul, nullptr, path == 0);
      CK(cudaDeviceSynchronize());
      const double es = testmetrics::max_rel_err(down(s.C, want_su.size()), want_su);
      std::printf("[ prefill gemm %s ] store %.2e, grouped silu*up %.2e\n", what.c_str(), e, es);
      EXPECT_LT(e, path == 0 ? 1e-4 : 1e-2);
      EXPECT_LT(es, path == 0 ? 1e-4 : 1e-2);
    }
}

// Decode MoE (H 512, E 64, top-8, I 128 (Q6_K: 256), Is 256; router and shared gate bf16): the experts' gate/up in the form
// with down in the form or in bf16, or gate/up 4-bit affine (group 32, f32 scales and biases: a Q4_K repack) with
// down in the form; two launches and fused; f32 x and int8 x (which serves the 4-bit and kQ6 rows). Routing equal to
// the reference's; output within 1e-5 (int8 x on 4-bit rows: 2e-4), CudaMoeDecode.MatchesReference's bounds.
TEST_P(CudaCode8Forms, MoeMatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xRestore restore;
  const int H = 512, E = 64, K = 8, I = GetParam() == Code8::Q6K ? 256 : 128, Is = 256;  // Q6_K rows: 256-blocks
  enum Mix { kAll, kDownBf16, kQ4GateUp };
  for (const Mix mix : {kAll, kDownBf16, kQ4GateUp})
    for (const bool fused : {false, true})
      for (const bool int8x : {false, true}) {
        if (int8x && mix != kQ4GateUp && !(GetParam() == Code8::Q6K && mix == kAll)) continue;  // what int8 x serves
        const std::string what = std::string(testcuda::code8_name(GetParam())) + " mix " + std::to_string(int(mix)) +
                                 (fused ? " fused" : " two launches") + (int8x ? " int8 x" : " f32 x");
        SCOPED_TRACE(what);
        cuda::set_decode_int8_x(int8x);
        std::mt19937 rng(41 + int(GetParam()));
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        Dev dev;
        testcuda::FormStack router, shgw, dn16, sd16, gate4, up4, sg4, su4;
        Code8Stack gate, up, dn, sg, su, sd;
        make_form(router, 1, E, H, 16, 64, testcuda::Origin::Bf16, rng, dev);
        make_form(shgw, 1, 1, H, 16, 64, testcuda::Origin::Bf16, rng, dev);
        std::vector<QMatrix> qg, qu, qd, qsg, qsu, qsd;
        cuda::DStack dg, du, dd;
        cuda::DMat dsg, dsu, dsd;
        if (mix == kQ4GateUp) {
          make_form(gate4, E, I, H, 4, 32, testcuda::Origin::F32Free, rng, dev);
          make_form(up4, E, I, H, 4, 32, testcuda::Origin::F32Free, rng, dev);
          make_form(sg4, 1, Is, H, 4, 32, testcuda::Origin::F32Free, rng, dev);
          make_form(su4, 1, Is, H, 4, 32, testcuda::Origin::F32Free, rng, dev);
          qg = gate4.twin, qu = up4.twin, qsg = sg4.twin, qsu = su4.twin;
          dg = gate4.d, du = up4.d, dsg = sg4.d.m, dsu = su4.d.m;
        } else {
          make_code8(gate, E, I, H, GetParam(), rng, dev);
          make_code8(up, E, I, H, GetParam(), rng, dev);
          make_code8(sg, 1, Is, H, GetParam(), rng, dev);
          make_code8(su, 1, Is, H, GetParam(), rng, dev);
          qg = gate.src, qu = up.src, qsg = sg.src, qsu = su.src;
          dg = gate.d, du = up.d, dsg = sg.d.m, dsu = su.d.m;
        }
        if (mix == kDownBf16) {
          make_form(dn16, E, H, I, 16, 64, testcuda::Origin::Bf16, rng, dev);
          make_form(sd16, 1, H, Is, 16, 64, testcuda::Origin::Bf16, rng, dev);
          qd = dn16.twin, qsd = sd16.twin;
          dd = dn16.d, dsd = sd16.d.m;
        } else {
          make_code8(dn, E, H, I, GetParam(), rng, dev);
          make_code8(sd, 1, H, Is, GetParam(), rng, dev);
          qd = dn.src, qsd = sd.src;
          dd = dn.d, dsd = sd.d.m;
        }
        std::vector<float> x(H), nw(H), xn(H), logits(E);
        for (auto& v : x) v = 2.f * u(rng);
        for (auto& v : nw) v = 1.f + 0.3f * u(rng);
        std::vector<float> want(x);  // the residual the MoE adds into
        ref::rmsnorm(x.data(), nw.data(), H, 1e-6f, xn.data());
        ref::matvec(router.twin[0], xn.data(), logits.data());
        float shg = 0.f;
        ref::matvec(shgw.twin[0], xn.data(), &shg);
        std::vector<int> idx(K);
        std::vector<float> wt(K);
        ref::route_topk(logits.data(), E, K, idx.data(), wt.data());
        auto expert = [&](const QMatrix& g, const QMatrix& uq, const QMatrix& d, int inter, float scale) {
          std::vector<float> gv(static_cast<size_t>(inter)), uv(static_cast<size_t>(inter)), y(H);
          ref::matvec(g, xn.data(), gv.data());
          ref::matvec(uq, xn.data(), uv.data());
          for (int i = 0; i < inter; ++i) gv[size_t(i)] = ref::silu(gv[size_t(i)]) * uv[size_t(i)];
          ref::matvec(d, gv.data(), y.data());
          for (int i = 0; i < H; ++i) want[size_t(i)] += scale * y[size_t(i)];
        };
        for (int j = 0; j < K; ++j)
          expert(qg[size_t(idx[j])], qu[size_t(idx[j])], qd[size_t(idx[j])], I, wt[size_t(j)]);
        expert(qsg[0], qsu[0], qsd[0], Is, ref::sigmoid(shg));
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
        a.early_route = fused ? 1 : 0;
        a.E = E;
        a.k = K;
        a.gate = dg;
        a.up = du;
        a.down = dd;
        a.sh_gate = dsg;
        a.sh_up = dsu;
        a.sh_down = dsd;
        a.act = dev.poisoned(size_t(K) * I + Is);
        a.route_idx = reinterpret_cast<int32_t*>(dev.poisoned(K));
        a.route_w = dev.poisoned(K);
        a.out = dx;
        if (fused) {
          cuda::moe_route_gate_up(a, nullptr, true);
        } else {
          cuda::moe_router(a, nullptr, true);
          cuda::moe_gate_up(a, nullptr, true);
        }
        cuda::moe_down(a, nullptr, true);
        CK(cudaDeviceSynchronize());
        const std::vector<int32_t> gidx = down(a.route_idx, K);
        for (int j = 0; j < K; ++j) EXPECT_EQ(gidx[size_t(j)], idx[size_t(j)]) << "slot " << j;
        const double e = testmetrics::rms_rel_err(down(dx, H), want);
        std::printf("[ moe %s ] %.2e\n", what.c_str(), e);
        EXPECT_LT(e, int8x ? 2e-4 : 1e-5);
      }
}

// An affine 4-bit matrix uploaded as 8-bit codes (describe_matrix's widen8, as the backend does for the MoE
// projections of mixed recipes): the same GEMV values as the reference on its twin (1e-5).
TEST(CudaWidenedAffine, GemvMatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  testcuda::FormStack a;
  make_form(a, 1, 300, 2048, 4, 32, testcuda::Origin::F32Free, rng, dev);
  cuda::DMat m = cuda::describe_matrix(a.src[0], "test matrix", true);
  ASSERT_EQ(m.fmt, cuda::kQ8H);  // f32 scales: fp16 pairs, as the 4-bit twin (kQ4H)
  ASSERT_EQ(cuda::dmat_w_bytes(m), size_t(300) * 2048);
  uint8_t* dw = dev.poisoned<uint8_t>(cuda::dmat_w_bytes(m));
  uint32_t* dsb = dev.poisoned<uint32_t>(cuda::dmat_sb_words(m));
  cuda::copy_matrix(a.src[0], m, dw, dsb);
  m.w = dw;
  m.sb = dsb;
  std::vector<float> x(2048), want(300);
  for (auto& v : x) v = u(rng);
  ref::matvec(a.twin[0], x.data(), want.data());
  float* dy = dev.poisoned(300);
  cuda::GemvSeg seg = {m, dy, 0};
  cuda::gemv(&seg, 1, dev.up(x), nullptr, 1e-6f, nullptr, false);
  CK(cudaDeviceSynchronize());
  EXPECT_LT(testmetrics::rms_rel_err(down(dy, 300), want), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Forms, CudaCode8Forms, ::testing::Values(Code8::Fp8F32, Code8::Fp8Bf16, Code8::Q6K),
                         [](const auto& info) { return std::string(testcuda::code8_name(info.param)); });

}  // namespace

#endif  // LILY_HAVE_CUDA
