// The decode kernels' rows forms (a speculative verify's rows in one launch, each row on 1/n of the grid where the
// verify sets that share) against one launch per row: the same results, bit for bit.
// - MoE (MoeArgs::rows): a warp holds several act rows or hidden rows and stages those after its first in shared
//   memory; the model's expert sizes (E = 256, k = 8, I = Is = 512) with the router-from-y form of the decode step.
// - lm_head + argmax (Rows): two row sets per warp for 2-4 rows (MR = 2, 4), one for more (MR = 8).
// - DeltaNet step (GdnArgs::rows): the rows in turn on the state; outputs, snapshots and the final state as after
//   one launch per row.
// Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "cuda_aff_stack.h"
#include "cuda_test_buffers.h"
#include "core/dtype.h"
#include "cuda/cuda_factory.h"
#include "cuda/decode/kernels.h"

using namespace lily;

namespace {

using testcuda::AffStack;
using testcuda::Dev;
using testcuda::make_stack;

// Sets the decode kernels' x form for a test and restores it, and the grid share, at scope exit.
struct DecodeForms {
  bool int8_x = cuda::decode_int8_x();
  explicit DecodeForms(bool x) { cuda::set_decode_int8_x(x); }
  ~DecodeForms() {
    cuda::set_decode_int8_x(int8_x);
    cuda::set_decode_grid_share(1);
  }
};

// (rows n, int8 x)
class CudaMoeRows : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(CudaMoeRows, EqualOneLaunchPerRow) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int n = std::get<0>(GetParam());
  const DecodeForms forms(std::get<1>(GetParam()));
  const int H = 1024, E = 256, K = 8, I = 512, Is = 512, A = K * I + Is;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  AffStack router, shgw, gate, up, dn, sg, su, sd;
  make_stack(router, 1, E, H, 8, rng, dev);  // not read in the router-from-y form, but checked
  make_stack(shgw, 1, 1, H, 8, rng, dev);
  make_stack(gate, E, I, H, 4, rng, dev);
  make_stack(up, E, I, H, 4, rng, dev);
  make_stack(dn, E, H, I, 4, rng, dev);
  make_stack(sg, 1, Is, H, 4, rng, dev);
  make_stack(su, 1, Is, H, 4, rng, dev);
  make_stack(sd, 1, H, Is, 4, rng, dev);
  std::vector<float> nw(H);
  for (auto& v : nw) v = 1.f + 0.3f * u(rng);

  // one row's scratch, in floats (each piece 16-byte aligned): x = out | pre (part-major) | act | shg | route_w |
  // route_idx | route_done
  const int PRE = cuda::kMoePreMaxParts * cuda::kMoePrePartStride;
  const int o_pre = H, o_act = o_pre + PRE, o_shg = o_act + A, o_w = o_shg + 4, o_idx = o_w + 16, o_done = o_idx + 16;
  const int row_floats = o_done + 8;
  const int64_t stride = int64_t(row_floats) * 4;
  std::vector<float> init(size_t(n) * row_floats, 0.f);
  for (int j = 0; j < n; ++j) {
    float* r = init.data() + size_t(j) * row_floats;
    for (int i = 0; i < H; ++i) r[i] = 2.f * u(rng);
    for (int p = 0; p < 3; ++p)  // the logits' parts of elements 0..E (E: the shared-expert gate)
      for (int e = 0; e <= E; ++e) r[o_pre + p * cuda::kMoePrePartStride + e] = 0.5f * u(rng);
    std::memset(r + o_done, 0, 8 * 4);
  }
  float* const d_rows = dev.up(init);  // the rows launch's scratch
  float* const d_one = dev.up(init);   // the per-row launches'

  auto args = [&](float* base) {
    cuda::MoeArgs a;
    a.x = base;
    a.out = base;
    a.norm_w = dev.up(nw);
    a.eps = 1e-6f;
    a.router = router.d.m;
    a.shg_w = shgw.d.m;
    a.pre = base + o_pre;
    a.pre_parts = 3;
    a.pre_es = 1;
    a.pre_ps = cuda::kMoePrePartStride;
    a.shg = base + o_shg;
    a.act = base + o_act;
    a.route_w = base + o_w;
    a.route_idx = reinterpret_cast<int32_t*>(base + o_idx);
    a.route_done = reinterpret_cast<unsigned int*>(base + o_done);
    a.early_route = 1;
    a.E = E;
    a.k = K;
    a.gate = gate.d;
    a.up = up.d;
    a.down = dn.d;
    a.sh_gate = sg.d.m;
    a.sh_up = su.d.m;
    a.sh_down = sd.d.m;
    return a;
  };
  for (int rep = 0; rep < 2; ++rep) {  // again: the flags and counters must reset themselves
    CK(cudaMemcpy(d_rows, init.data(), init.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_one, init.data(), init.size() * 4, cudaMemcpyHostToDevice));
    cuda::MoeArgs a = args(d_rows);
    a.rows = {n, stride};
    cuda::set_decode_grid_share(n);  // as a verify step launches them
    cuda::moe_route_gate_up(a, nullptr, true);
    cuda::moe_down(a, nullptr, true);
    cuda::set_decode_grid_share(1);
    for (int j = 0; j < n; ++j) {
      cuda::MoeArgs b = args(d_one + size_t(j) * row_floats);
      cuda::moe_route_gate_up(b, nullptr, true);
      cuda::moe_down(b, nullptr, true);
    }
    CK(cudaDeviceSynchronize());
    const std::vector<float> got = testcuda::down(d_rows, init.size()), want = testcuda::down(d_one, init.size());
    for (int j = 0; j < n; ++j) {
      const float* g = got.data() + size_t(j) * row_floats;
      const float* w = want.data() + size_t(j) * row_floats;
      EXPECT_EQ(std::memcmp(g + o_idx, w + o_idx, K * 4), 0) << "rep " << rep << " row " << j << ": routing";
      int bad_act = 0, bad_out = 0;
      for (int i = 0; i < A; ++i) bad_act += std::memcmp(g + o_act + i, w + o_act + i, 4) != 0;
      for (int i = 0; i < H; ++i) bad_out += std::memcmp(g + i, w + i, 4) != 0;
      EXPECT_EQ(bad_act, 0) << "rep " << rep << " row " << j << ": act values differing of " << A;
      EXPECT_EQ(bad_out, 0) << "rep " << rep << " row " << j << ": residual values differing of " << H;
      EXPECT_EQ(g[0], g[0]) << "rep " << rep << " row " << j << ": NaN residual";
      for (int i : {0, 2, 3, 4, 5, 6, 7})  // the counters left zeroed (word 1: the barrier's generation)
        EXPECT_EQ(reinterpret_cast<const uint32_t*>(g + o_done)[i], 0u) << "row " << j << " word " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RowsAndActivations, CudaMoeRows,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8), ::testing::Bool()));

// (rows n, int8 x)
class CudaLmHeadRows : public ::testing::TestWithParam<std::tuple<int, bool>> {};

// Each row's logits and argmax id (written at its own cursor) as a launch for that row alone. 2048 columns: the
// 4-bit form with two row sets per warp; 70001 rows: each set turns over many times.
TEST_P(CudaLmHeadRows, EqualOneLaunchPerRow) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int n = std::get<0>(GetParam());
  const DecodeForms forms(std::get<1>(GetParam()));
  const int H = 2048, V = 70001;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  AffStack w;
  make_stack(w, 1, V, H, 4, rng, dev);
  std::vector<float> nw(H);
  for (auto& v : nw) v = 1.f + 0.3f * u(rng);
  float* const d_nw = dev.up(nw);
  // one row's scratch: x [H] | logits [V] | StepCtl (cursor j: the row's id goes to out_ids[j]; no input written)
  const int o_lg = H, o_ctl = (H + V + 3) / 4 * 4;
  const int row_floats = o_ctl + int((sizeof(cuda::StepCtl) + 15) / 16 * 4);
  const int64_t stride = int64_t(row_floats) * 4;
  std::vector<float> init(size_t(n) * row_floats, 0.f);
  for (int j = 0; j < n; ++j) {
    float* r = init.data() + size_t(j) * row_floats;
    for (int i = 0; i < H; ++i) r[i] = 3.f * u(rng);
    cuda::StepCtl c;
    c.cursor = j;
    c.n_given = 1 << 20;
    std::memcpy(r + o_ctl, &c, sizeof(c));
  }
  float* const d_rows = dev.up(init);
  float* const d_one = dev.up(init);
  int32_t* const in_ids = dev.up(std::vector<int32_t>(16, -1));
  int32_t* const ids_rows = dev.up(std::vector<int32_t>(16, -1));
  int32_t* const ids_one = dev.up(std::vector<int32_t>(16, -1));
  auto ctl = [&](float* base) { return reinterpret_cast<cuda::StepCtl*>(base + o_ctl); };
  cuda::set_decode_grid_share(n);  // as a verify step launches it
  cuda::lm_head_argmax(w.d.m, d_rows, d_nw, 1e-6f, d_rows + o_lg, in_ids, ids_rows, ctl(d_rows), nullptr, true,
                       nullptr, cuda::Rows{n, stride});
  cuda::set_decode_grid_share(1);
  for (int j = 0; j < n; ++j) {
    float* b = d_one + size_t(j) * row_floats;
    cuda::lm_head_argmax(w.d.m, b, d_nw, 1e-6f, b + o_lg, in_ids, ids_one, ctl(b), nullptr, true);
  }
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = testcuda::down(d_rows, init.size()), want = testcuda::down(d_one, init.size());
  const std::vector<int32_t> gid = testcuda::down(ids_rows, 16), wid = testcuda::down(ids_one, 16);
  for (int j = 0; j < n; ++j) {
    const float* g = got.data() + size_t(j) * row_floats;
    const float* e = want.data() + size_t(j) * row_floats;
    int bad = 0;
    for (int i = 0; i < V; ++i) bad += std::memcmp(g + o_lg + i, e + o_lg + i, 4) != 0;
    EXPECT_EQ(bad, 0) << "row " << j << ": logits differing of " << V;
    EXPECT_EQ(gid[size_t(j)], wid[size_t(j)]) << "row " << j << ": argmax id";
    EXPECT_GE(wid[size_t(j)], 0) << "row " << j;
    cuda::StepCtl gc, ec;
    std::memcpy(static_cast<void*>(&gc), g + o_ctl, sizeof(gc));
    std::memcpy(static_cast<void*>(&ec), e + o_ctl, sizeof(ec));
    EXPECT_EQ(gc.cursor, j + 1) << "row " << j;
    EXPECT_EQ(gc.pos, ec.pos) << "row " << j;
    EXPECT_EQ(gc.best, 0ull) << "row " << j;
  }
  for (int j = 0; j < 16; ++j) EXPECT_EQ(testcuda::down(in_ids, 16)[size_t(j)], -1) << "no input written";
}

INSTANTIATE_TEST_SUITE_P(RowsAndActivations, CudaLmHeadRows,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8), ::testing::Bool()));

// (rows n, row 0's position p0, y as an XQ image)
class CudaGdnRows : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

// The model's DeltaNet heads (16 key / 32 value heads of 128, 4 taps) in the split form. p0 = 1: the first rows'
// conv windows reach before position 0 (zeros in the conv, the ring slots kept as they were).
TEST_P(CudaGdnRows, EqualOneLaunchPerRow) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int n = std::get<0>(GetParam()), p0 = std::get<1>(GetParam());
  const bool yq = std::get<2>(GetParam());
  const int Hk = 16, Hv = 32, Dk = 128, Dv = 128, K = 4, layer = 1, nlayer = 2;
  const int C = 2 * Hk * Dk + Hv * Dv, P = cuda::gdn_split_parts(Dv), NY = Hv * Dv;
  std::mt19937 rng(700 + n + p0);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> convw(size_t(C) * K), dtb(Hv), aneg(Hv), nw(Dv);
  for (auto& x : convw) x = 0.5f * u(rng);
  for (auto& x : dtb) x = 0.5f * u(rng);
  for (auto& x : aneg) x = -0.5f - 0.5f * std::fabs(u(rng));
  for (auto& x : nw) x = 1.f + 0.2f * u(rng);
  const size_t s_floats = size_t(nlayer) * Hv * Dv * Dk, r_floats = size_t(nlayer) * K * C;
  std::vector<float> state(s_floats + r_floats);  // S | conv rings, as a snapshot slot lays them out
  for (size_t i = 0; i < s_floats; ++i) state[i] = 0.1f * u(rng);
  for (size_t i = s_floats; i < state.size(); ++i) state[i] = u(rng);
  // one row's scratch, in floats: qkv | z | b | a | y | hss | yq image
  const int o_z = C, o_b = o_z + NY, o_a = o_b + Hv, o_y = o_a + Hv, o_hss = o_y + NY, o_yq = o_hss + Hv * P;
  const int row_floats = o_yq + int((cuda::xq_image_bytes(NY) + 15) / 16 * 4);
  const int64_t stride = int64_t(row_floats) * 4;
  std::vector<float> init(size_t(n) * row_floats, 0.f);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < o_y; ++i) init[size_t(j) * row_floats + i] = u(rng);
  Dev dev;
  float* const d_rows = dev.up(init);
  float* const d_one = dev.up(init);
  float* const st_rows = dev.up(state);
  float* const st_one = dev.up(state);
  std::vector<float*> snaps;
  for (int i = 0; i + 1 < n; ++i) snaps.push_back(dev.poisoned(state.size()));
  unsigned int* const qk_read = dev.up(std::vector<unsigned int>(Hk, 0u));
  std::vector<cuda::StepCtl> ctls(size_t(n) + 1);
  for (int j = 0; j <= n; ++j) {  // [0]: the rows launch's; [1 + j]: row j's own launch
    cuda::StepCtl& c = ctls[size_t(j)];
    c.S = j == 0 ? st_rows : st_one;
    c.conv = (j == 0 ? st_rows : st_one) + s_floats;
    c.pos = p0 + std::max(j - 1, 0);
  }
  cuda::StepCtl* const dctl = dev.up(ctls);
  auto args = [&](float* base, int ci) {
    cuda::GdnArgs g;
    g.qkv = base;
    g.z = base + o_z;
    g.b = base + o_b;
    g.a = base + o_a;
    g.conv_w = dev.up(convw);
    g.dt_bias = dev.up(dtb);
    g.a_neg = dev.up(aneg);
    g.norm_w = dev.up(nw);
    g.layer = layer;
    g.Hk = Hk;
    g.Hv = Hv;
    g.Dk = Dk;
    g.Dv = Dv;
    g.K = K;
    g.eps = 1e-6f;
    g.y = base + o_y;
    g.hss = base + o_hss;
    g.yq = yq ? static_cast<void*>(base + o_yq) : nullptr;
    g.ctl = dctl + ci;
    return g;
  };
  cuda::GdnArgs g = args(d_rows, 0);
  g.rows = {n, stride};
  for (int i = 0; i + 1 < n; ++i) g.snap[i] = snaps[size_t(i)];
  g.snap_conv = int64_t(s_floats);
  g.qk_read = qk_read;
  cuda::gdn_decode(g, nullptr, true);
  CK(cudaDeviceSynchronize());
  const size_t s_off = size_t(layer) * Hv * Dv * Dk, s_len = size_t(Hv) * Dv * Dk;
  const size_t r_off = s_floats + size_t(layer) * K * C, r_len = size_t(K) * C;
  auto differing = [](const float* x, const float* y, size_t len) {
    size_t bad = 0;
    for (size_t i = 0; i < len; ++i) bad += std::memcmp(x + i, y + i, 4) != 0;
    return bad;
  };
  for (int j = 0; j < n; ++j) {
    cuda::gdn_decode(args(d_one + size_t(j) * row_floats, 1 + j), nullptr, true);
    CK(cudaDeviceSynchronize());
    const std::vector<float> want = testcuda::down(st_one, state.size());
    const std::vector<float> got = testcuda::down(j + 1 < n ? snaps[size_t(j)] : st_rows, state.size());
    EXPECT_EQ(differing(got.data() + s_off, want.data() + s_off, s_len), 0u) << "row " << j << ": S after it";
    EXPECT_EQ(differing(got.data() + r_off, want.data() + r_off, r_len), 0u) << "row " << j << ": conv ring after it";
  }
  const std::vector<float> got = testcuda::down(d_rows, init.size()), want = testcuda::down(d_one, init.size());
  for (int j = 0; j < n; ++j) {
    const float* gr = got.data() + size_t(j) * row_floats;
    const float* wr = want.data() + size_t(j) * row_floats;
    EXPECT_EQ(differing(gr + o_y, wr + o_y, size_t(row_floats - o_y)), 0u) << "row " << j << ": y, hss, yq";
    EXPECT_EQ(gr[o_hss], gr[o_hss]) << "row " << j << ": NaN";
  }
  EXPECT_EQ(testcuda::down(qk_read, Hk), std::vector<unsigned int>(Hk, 0u)) << "the read counters reset";
}

INSTANTIATE_TEST_SUITE_P(RowsPositionsForms, CudaGdnRows,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8), ::testing::Values(1, 40),
                                            ::testing::Bool()));

}  // namespace
#endif
