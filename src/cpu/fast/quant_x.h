// Activations quantised for the integer 4-bit kernels (s·Σxq + b·Σx per weight group: 64, or 32 with the
// halves' sums).
// x/dx ≈ hi + lo/254 with hi, lo int8 in [-127, 127]: hi alone gives ~8-bit activations (fast mode),
// hi + lo gives ~15-bit (precise mode, close to f32 results) relative to the group's largest |x|.
// Outliers: a row's elements over kOutlierRatio times its typical |x| (the mean |x| without its kMaxOutliers
// largest; at most kMaxOutliers per row) would leave the small values of their group too few bits ("massive
// activations": a few channels in the thousands beside values near 1). quantize_x / quantize_x_rows take them out
// of the codes (quantised as 0) and keep them in f32; the matmul adds x·w for each (add_outliers).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/fast/cpu_isa.h"

namespace lily::fast {

struct QuantX {
  int n = 0;      // rows of X
  int G = 0;      // groups of 64 per row
  int P = 0;      // pairs of groups = ceil(G/2)
  std::vector<int8_t> hi, lo;  // [n][P][128]: per pair [g even 32 | g+1 even 32 | g odd 32 | g+1 odd 32]
  std::vector<float> dx;       // [n][P][16]: lanes 0-7 dx_g, lanes 8-15 dx_{g+1} (0 past the end)
  std::vector<float> sum;      // [n][G]: Σx over the group (exact f32)
  std::vector<float> dxg;      // [n][G]: dx per group
  bool halves = false;         // sum32 filled (for matrices with groups of 32)
  std::vector<float> sum32;    // [n][2G]: Σx over each half (32 elements) of a group, summed in order
  // 8·Σδ with δ = x - dx·(hi + lo/254) (precise) or x - dx·hi, the activation rounding, summed in double: per
  // group [n][G], and per half [n][2G] with halves. The kernels add s·res8 to each group's s·dx·Σ(q·xq), so that
  // the rounding enters as s·Σ(q - 8)·δ instead of s·Σq·δ (codes centred: about half the error).
  std::vector<float> res8, res8_32;
  std::vector<int32_t> n_out;   // [n]: outliers of the row (0..kMaxOutliers)
  std::vector<int32_t> out_col; // [n][kMaxOutliers]: their columns
  std::vector<float> out_val;   // [n][kMaxOutliers]: their values (f32, exact)

  // row's codes from group g on: row start for g = 0, else the even-element block of g inside its pair
  const int8_t* hi_at(int row, int g = 0) const { return hi.data() + offset(row, g); }
  const int8_t* lo_at(int row, int g = 0) const { return lo.data() + offset(row, g); }

 private:
  size_t offset(int row, int g) const {
    return static_cast<size_t>(row) * static_cast<size_t>(P) * 128 + static_cast<size_t>(g >> 1) * 128 +
           static_cast<size_t>(g & 1) * 32;
  }
};

// 4 consecutive int8 codes as one int32 (for broadcasts; unaligned)
inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline constexpr int kMaxOutliers = 8;
inline constexpr float kOutlierRatio = 64.0f;
// The outliers of one row x [cols] (as above) into col / val (kMaxOutliers each); returns their count.
int find_outliers(const float* x, int cols, int32_t* col, float* val);

// X [n, cols] f32 (cols % 64 == 0) -> q (buffers grow, never shrink: no allocation in steady state), outliers
// taken out as above.
// AVX-512 or AVX2 as fast::active_isa() says (bit-identical codes and scales to quantize_x_ref; Σx summed in
// another order, the same in both SIMD tiers).
void quantize_x(const float* X, int n, int cols, bool precise, QuantX& q, bool halves = false);
// The same in two steps, so that rows can be quantised in parallel: size q for [n, cols], then fill rows
// [i0, i1) (X points at row 0).
// halves: also Σx per 32 elements (sum32), for matrices with groups of 32.
void quantize_x_prepare(int n, int cols, bool precise, QuantX& q, bool halves = false);
void quantize_x_rows(const float* X, int i0, int i1, int cols, bool precise, QuantX& q);
// The same with a given tier, without taking outliers out (tests compare the tiers; `isa` must be supported by this
// CPU).
void quantize_x_isa(Isa isa, const float* X, int n, int cols, bool precise, QuantX& q, bool halves = false);
// Plain scalar version, without taking outliers out: the reference of the SIMD one.
void quantize_x_ref(const float* X, int n, int cols, bool precise, QuantX& q, bool halves = false);

}  // namespace lily::fast
