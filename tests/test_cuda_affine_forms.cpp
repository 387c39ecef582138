// Every CUDA kernel family that reads affine weights, on each form the loaders produce (4/8-bit codes, groups 32 /
// 64 / 128, bf16 scales or f32 ones with bias -z*scale or an independent bias; cuda_affine_mats.h), uploaded through
// the backend's own path, against the CPU reference on the host twin (the bf16 pairs the device keeps): decode GEMV
// (f32 and int8 x), lm_head, embedding rows (decode and prefill), the prefill GEMMs (simple, mma.sync, wgmma) and
// the MoE (router in bf16, 8-bit or the experts' form; router + gate_up as two launches or fused; down). 4-bit f32
// scales with bias -z * scale take kQ4Z (the f32 scale to 2^-20 and z in one word), other f32 scales fp16 pairs
// (kQ4H, kQ8H: the 8-bit codes here do not all fit kI8's int8 q - z), bf16 scales bf16 pairs. Also prints how far the twin is from the exact source weights (the cost of
// the pairs). Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "cuda_affine_mats.h"
#include "cuda_test_buffers.h"
#include "test_metrics.h"
#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/decode/kernels.h"
#include "cuda/prefill/prefill.h"
#include "int8x_model.h"

using namespace lily;
using testcuda::Dev;
using testcuda::down;
using testcuda::FormStack;
using testcuda::make_form;
using testcuda::Origin;

namespace {

struct Int8xRestore {
  bool v = cuda::decode_int8_x();
  ~Int8xRestore() { cuda::set_decode_int8_x(v); }
};

using Form = std::tuple<int, int, Origin>;  // bits, group, origin

class CudaAffineForms : public ::testing::TestWithParam<Form> {};

std::string form_name(const Form& f) {
  return std::to_string(std::get<0>(f)) + "bit g" + std::to_string(std::get<1>(f)) + " " +
         testcuda::origin_name(std::get<2>(f));
}

// GEMV (two segments, the second accumulating, RMSNorm prologue; 2048 columns, and 4096 where 4-bit rows take the
// whole-row kernel), with f32 x (1e-5) and (4-bit) int8 x: the int8 model (int8x_model.h) within 1e-5 and exact f32
// within 2e-4, CudaMoeDecode's bound (these centred weights give small sums, so the relative error of the int8 x
// sits above CudaGemv's 5e-5 on uncentred ones).
TEST_P(CudaAffineForms, GemvMatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [bits, group, origin] = GetParam();
  Int8xRestore restore;
  for (const int cols : {2048, 4096})
    for (const bool int8x : {false, true}) {
      if (int8x && bits != 4) continue;
      SCOPED_TRACE(form_name(GetParam()) + " cols " + std::to_string(cols) + (int8x ? " int8 x" : " f32 x"));
      cuda::set_decode_int8_x(int8x);
      std::mt19937 rng(5 + bits + group + cols + int(origin));
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      Dev dev;
      FormStack a, b;
      make_form(a, 1, 300, cols, bits, group, origin, rng, dev);
      make_form(b, 1, 77, cols, bits, group, origin, rng, dev);
      const int want_fmt = bits == 8                    ? (origin == Origin::Bf16 ? cuda::kQ8 : cuda::kQ8H)
                           : origin == Origin::F32Zero ? cuda::kQ4Z
                           : origin == Origin::F32Free ? cuda::kQ4H
                                                       : cuda::kQ4;
      EXPECT_EQ(a.d.m.fmt, want_fmt);
      EXPECT_EQ(b.d.m.fmt, want_fmt);
      std::vector<float> x(static_cast<size_t>(cols)), nw(static_cast<size_t>(cols)), y1(77), xn(static_cast<size_t>(cols));
      for (auto& v : x) v = 3.f * u(rng);
      for (auto& v : nw) v = 1.f + 0.5f * u(rng);
      for (auto& v : y1) v = u(rng);
      ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
      std::vector<float> want0(300), want1(77), exact0(300);
      ref::matvec(a.twin[0], xn.data(), want0.data());
      ref::matvec(b.twin[0], xn.data(), want1.data());
      ref::matvec(a.src[0], xn.data(), exact0.data());
      for (int i = 0; i < 77; ++i) want1[size_t(i)] += y1[size_t(i)];
      float* dy0 = dev.poisoned(300);
      float* dy1 = dev.up(y1);
      cuda::GemvSeg segs[2] = {{a.d.m, dy0, 0}, {b.d.m, dy1, 1}};
      cuda::gemv(segs, 2, dev.up(x), dev.up(nw), 1e-6f, nullptr, false);
      CK(cudaDeviceSynchronize());
      const auto got0 = down(dy0, 300), got1 = down(dy1, 77);
      if (int8x) {  // the int8 activation model (int8x_model.h) up to f32 rounding, and near exact (as the MoE test)
        std::vector<float> q0(300), q1(77);
        testing_int8x::matvec_hilo(a.twin[0], xn.data(), q0.data());
        testing_int8x::matvec_hilo(b.twin[0], xn.data(), q1.data());
        for (int i = 0; i < 77; ++i) q1[size_t(i)] += y1[size_t(i)];
        EXPECT_LT(testmetrics::rms_rel_err(got0, q0), 1e-5);
        EXPECT_LT(testmetrics::rms_rel_err(got1, q1), 1e-5);
      }
      const double bound = int8x ? 2e-4 : 1e-5;
      EXPECT_LT(testmetrics::rms_rel_err(got0, want0), bound);
      EXPECT_LT(testmetrics::rms_rel_err(got1, want1), bound);
      std::printf("[ gemv %s cols %d %s ] vs twin %.2e, twin vs exact source %.2e\n", form_name(GetParam()).c_str(),
                  cols, int8x ? "int8x" : "f32x", testmetrics::rms_rel_err(got0, want0),
                  testmetrics::rms_rel_err(want0, exact0));
    }
}

// lm_head + argmax (4-bit and 8-bit rows), and the embedding row kernels of decode and prefill (exact dequant).
TEST_P(CudaAffineForms, LmHeadAndEmbedMatchReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [bits, group, origin] = GetParam();
  SCOPED_TRACE(form_name(GetParam()));
  std::mt19937 rng(17 + bits + group + int(origin));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  const int rows = 5003, cols = 2048;
  FormStack m;
  make_form(m, 1, rows, cols, bits, group, origin, rng, dev);
  std::vector<float> x(static_cast<size_t>(cols)), nw(static_cast<size_t>(cols)), xn(static_cast<size_t>(cols)), want(static_cast<size_t>(rows));
  for (auto& v : x) v = 3.f * u(rng);
  for (auto& v : nw) v = 1.f + 0.5f * u(rng);
  ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
  ref::matvec(m.twin[0], xn.data(), want.data());
  float* dl = dev.poisoned(size_t(rows));
  int32_t* din = dev.up(std::vector<int32_t>{7, -1, -1, -1});
  int32_t* dout = dev.up(std::vector<int32_t>(4, -1));
  cuda::StepCtl c;
  c.n_given = 1;
  cuda::StepCtl* dc = dev.up(std::vector<cuda::StepCtl>{c});
  cuda::lm_head_argmax(m.d.m, dev.up(x), dev.up(nw), 1e-6f, dl, din, dout, dc, nullptr, false);
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = down(dl, size_t(rows));
  const bool int8x = bits == 4 && cuda::decode_int8_x();
  if (int8x) {  // the int8 activation model up to f32 rounding; near exact: these centred weights' sums are small
    std::vector<float> wq(static_cast<size_t>(rows));
    testing_int8x::matvec_hilo(m.twin[0], xn.data(), wq.data());
    EXPECT_LT(testmetrics::rms_rel_err(got, wq), 1e-5);
  }
  EXPECT_LT(testmetrics::rms_rel_err(got, want), int8x ? 2e-4 : 1e-5);
  int best = 0;
  for (int i = 1; i < rows; ++i)
    if (got[size_t(i)] > got[size_t(best)]) best = i;
  EXPECT_EQ(down(dout, 4)[0], best);
  // embedding rows: decode (row in_ids[cursor] = 7 after the lm_head advanced the cursor to 1: in_ids[1] = best)
  const std::vector<int32_t> ids = {3, 4999, 0};
  float* dx = dev.poisoned(size_t(cols) * ids.size());
  cuda::prefill_embed(m.d.m, dev.up(ids), int(ids.size()), dx, nullptr);
  CK(cudaDeviceSynchronize());
  const std::vector<float> gx = down(dx, size_t(cols) * ids.size());
  std::vector<float> wx(gx.size());
  for (size_t t = 0; t < ids.size(); ++t) dequant_row(m.twin[0], ids[t], wx.data() + t * size_t(cols));
  EXPECT_LT(testmetrics::max_rel_err(gx, wx), 1e-6) << "prefill embed";
  float* de = dev.poisoned(size_t(cols));
  cuda::embed(m.d.m, din, dc, de, nullptr, false);  // cursor 1: in_ids[1] = the argmax fed forward
  CK(cudaDeviceSynchronize());
  std::vector<float> we(static_cast<size_t>(cols));
  dequant_row(m.twin[0], best, we.data());
  EXPECT_LT(testmetrics::max_rel_err(down(de, size_t(cols)), we), 1e-6) << "decode embed";
}

// Prefill GEMM, dense store: the simple path (f32 dequant) and the tensor-core kernels (the bounds of
// PrefillGemm.DenseAddAndGroupedSiluMulMatchReference: 1e-4 and 1e-2 of max |y|).
TEST_P(CudaAffineForms, PrefillGemmMatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [bits, group, origin] = GetParam();
  std::mt19937 rng(29 + bits + group + int(origin));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  const int M = 150, N = 200, K = 384;  // 6 k-tiles of 64; 3 groups of 128
  FormStack w;
  make_form(w, 1, N, K, bits, group, origin, rng, dev);
  std::vector<float> a(size_t(M) * K), want(size_t(M) * N);
  std::vector<uint16_t> ab(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ab[i] = f32_to_bf16(u(rng));
    a[i] = bf16_to_f32(ab[i]);
  }
  ref::matmul(w.twin[0], a.data(), M, want.data());
  for (const int path : {0, int(cuda::kGemmKernelV2), int(cuda::kGemmKernelWG)}) {
    if (path == cuda::kGemmKernelWG && !cuda::prefill_gemm_wg_available()) continue;
    SCOPED_TRACE(form_name(GetParam()) + " path " + std::to_string(path));
    cuda::GemmArgs g;
    g.A = dev.up(ab);
    g.lda = K;
    g.M = M;
    g.W0 = w.d.m;
    g.C = dev.poisoned(want.size());
    g.ldc = N;
    g.kernel = path;
    cuda::prefill_gemm(g, cuda::kGemmStore, nullptr, path == 0);
    CK(cudaDeviceSynchronize());
    const double e = testmetrics::max_rel_err(down(g.C, want.size()), want);
    std::printf("[ prefill gemm %s path %d ] %.2e\n", form_name(GetParam()).c_str(), path, e);
    EXPECT_LT(e, path == 0 ? 1e-4 : 1e-2);
  }
}

// Decode MoE: experts and shared expert in this form (H 512, E 64, top-8, I 128, Is 256), router + shared gate in
// bf16, in 8-bit group 64 (bf16 scales) or in this form, down projections in this form or in bf16; two launches and
// fused; f32 x and (4-bit) int8 x. Routing
// equal to the reference's; output within the bounds of CudaMoeDecode.MatchesReference (1e-5; int8 x 2e-4).
TEST_P(CudaAffineForms, MoeMatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [bits, group, origin] = GetParam();
  Int8xRestore restore;
  const int H = 512, E = 64, K = 8, I = 128, Is = 256;
  std::vector<int> rforms = {16, 8};  // 8-bit routers: group 64 bf16, or this form where the experts are 8-bit
  if (bits == 4) rforms.push_back(4);
  for (const int rform : rforms)
    for (const int dform : {bits, 16})  // down projections in bf16 beside the form (Q6_K layers of Q4_K_M files)
      for (const bool fused : {false, true})
        for (const bool int8x : {false, true}) {
          if ((int8x && bits != 4) || (dform == 16 && rform != 16)) continue;
          SCOPED_TRACE(form_name(GetParam()) + " router " + std::to_string(rform) + " down " + std::to_string(dform) +
                       (fused ? " fused" : " two launches") + (int8x ? " int8 x" : " f32 x"));
          cuda::set_decode_int8_x(int8x);
          std::mt19937 rng(41 + bits + group + int(origin));
          std::uniform_real_distribution<float> u(-1.f, 1.f);
          Dev dev;
          FormStack router, shgw, gate, up, dn, sg, su, sd;
          const bool rsame = rform == bits;
          make_form(router, 1, E, H, rform, rsame ? group : 64, rsame ? origin : Origin::Bf16, rng, dev);
          make_form(shgw, 1, 1, H, rform, rsame ? group : 64, rsame ? origin : Origin::Bf16, rng, dev);
          make_form(gate, E, I, H, bits, group, origin, rng, dev);
          make_form(up, E, I, H, bits, group, origin, rng, dev);
          make_form(dn, E, H, I, dform, group, origin, rng, dev);
          make_form(sg, 1, Is, H, bits, group, origin, rng, dev);
          make_form(su, 1, Is, H, bits, group, origin, rng, dev);
          make_form(sd, 1, H, Is, dform, group, origin, rng, dev);
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
            expert(gate.twin[size_t(idx[j])], up.twin[size_t(idx[j])], dn.twin[size_t(idx[j])], I, wt[size_t(j)]);
          expert(sg.twin[0], su.twin[0], sd.twin[0], Is, ref::sigmoid(shg));
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
          EXPECT_LT(testmetrics::rms_rel_err(down(a.logits, E), logits), 1e-5);
          const double e = testmetrics::rms_rel_err(down(dx, H), want);
          std::printf("[ moe %s router %d down %d %s %s ] %.2e\n", form_name(GetParam()).c_str(), rform, dform,
                      fused ? "fused" : "two", int8x ? "int8x" : "f32x", e);
          EXPECT_LT(e, int8x ? 2e-4 : 1e-5);
        }
}

INSTANTIATE_TEST_SUITE_P(Forms, CudaAffineForms,
                         ::testing::Combine(::testing::Values(4, 8), ::testing::Values(32, 64, 128),
                                            ::testing::Values(Origin::Bf16, Origin::F32Zero, Origin::F32Free)),
                         [](const auto& info) {
                           std::string n = "b";
                           n += std::to_string(std::get<0>(info.param));
                           n += "_g";
                           n += std::to_string(std::get<1>(info.param));
                           n += "_";
                           n += testcuda::origin_name(std::get<2>(info.param));
                           return n;
                         });

}  // namespace

#endif  // LILY_HAVE_CUDA
