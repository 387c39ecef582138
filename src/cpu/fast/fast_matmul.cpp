// The fast CPU matmul: 4-bit affine group-64 matrices go to the integer kernels (AVX-512 VNNI when the CPU
// has it, else portable); every other matrix (8-bit, bf16, f32) is decoded a row at a time and dotted in f32.
// Rows are split across the thread pool; scratch buffers are per thread and only ever grow.
#include "cpu/fast/fast_matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cpu/fast/q4_kernels.h"
#include "cpu/thread_pool.h"

namespace lily::fast {

namespace {

bool use_avx512() {
  static const bool v = [] {
    const char* e = std::getenv("LILY_CPU_SIMD");
    if (e && !std::strcmp(e, "portable")) return false;
    return q4_avx512_available();
  }();
  return v;
}

void generic_rows(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int n, float* Y) {
  thread_local std::vector<float> row;
  if (row.size() < static_cast<size_t>(W.cols)) row.resize(W.cols);
  for (int64_t r = r0; r < r1; ++r) {
    dequant_row(W, r, row.data());
    for (int i = 0; i < n; ++i) {
      const float* x = X + static_cast<size_t>(i) * W.cols;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t c = 0;
      for (; c + 8 <= W.cols; c += 8)
        for (int k = 0; k < 8; ++k) acc[k] += row[c + k] * x[c + k];
      float s = 0.0f;
      for (; c < W.cols; ++c) s += row[c] * x[c];
      for (float v : acc) s += v;
      Y[static_cast<size_t>(i) * W.rows + r] = s;
    }
  }
}

}  // namespace

bool is_q4g64(const QMatrix& W) {
  return W.kind == QMatrix::Kind::Affine && W.bits == 4 && W.group == 64 && W.cols % 64 == 0 && W.cols / 64 <= 256;
}

void matmul(const QMatrix& W, const float* X, int n, float* Y, bool precise) {
  ThreadPool& pool = ThreadPool::global();
  const int64_t block = std::max<int64_t>(4, std::min<int64_t>(64, W.rows / (8 * pool.size()) + 1));
  const int tasks = static_cast<int>((W.rows + block - 1) / block);
  if (is_q4g64(W)) {
    thread_local QuantX tq;  // owned by the calling thread; the workers read it through `q`
    QuantX& q = tq;          // (a lambda naming `tq` would see each worker's own thread_local)
    quantize_x(X, n, static_cast<int>(W.cols), precise, q);
    const bool avx = use_avx512();
    pool.parallel_for(tasks, [&](int t, int) {
      const int64_t r0 = t * block, r1 = std::min(W.rows, r0 + block);
      if (avx)
        q4_rows_avx512(W, r0, r1, q, precise, Y);
      else
        q4_rows_portable(W, r0, r1, q, precise, Y);
    });
    return;
  }
  pool.parallel_for(tasks, [&](int t, int) {
    const int64_t r0 = t * block, r1 = std::min(W.rows, r0 + block);
    generic_rows(W, r0, r1, X, n, Y);
  });
}

}  // namespace lily::fast
