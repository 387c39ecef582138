// The fast CPU matmul: 4-bit affine group-64 and group-32 matrices go to the integer kernels (AVX-512 VNNI, AVX2 + FMA or
// portable, as fast::active_isa() says); GGUF Q6_K blocks to their integer kernel on the same activations (AVX-512) or
// to their f32 kernel (AVX2); 8-bit affine and bf16 matrices to the AVX-512 / AVX2 f32 kernels; every other matrix
// (and all of them on the portable tier) is decoded a row at a time and dotted in f32.
// Rows are split across the thread pool; scratch buffers are per thread and only ever grow.
#include "cpu/fast/fast_matmul.h"

#include <algorithm>

#include "cpu/fast/cpu_isa.h"
#include "cpu/fast/q4_kernels.h"
#include "cpu/fast/q6k_kernels.h"
#include "cpu/fast/scale_at.h"
#include "cpu/thread_pool.h"

namespace lily::fast {

namespace {

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

// Y[i][r] += Σ x·w over row i's outliers (QuantX: taken out of the codes, kept in f32), r in [r0, r1); W is 4-bit
// affine with groups of 64 or 32 (is_q4_integer): element c of row r is nibble c & 1 of byte c / 2, w = s·q + b of
// its group c / W.group.
void add_outliers(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& q, float* Y) {
  for (int i = 0; i < q.n; ++i) {
    const int k = q.n_out[static_cast<size_t>(i)];
    if (k == 0) continue;
    const int32_t* col = &q.out_col[static_cast<size_t>(i) * kMaxOutliers];
    const float* val = &q.out_val[static_cast<size_t>(i) * kMaxOutliers];
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = static_cast<const uint8_t*>(W.w) + r * W.row_bytes();
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const int c = col[j];
        const uint8_t byte = wr[c >> 1];
        const int code = (c & 1) ? byte >> 4 : byte & 0x0F;
        const int64_t gi = r * (W.cols / W.group) + c / W.group;
        acc += val[j] * (scale_at(W.scales, W.sdtype, gi) * static_cast<float>(code) + scale_at(W.biases, W.sdtype, gi));
      }
      Y[static_cast<size_t>(i) * W.rows + r] += acc;
    }
  }
}

}  // namespace

bool is_q4_integer(const QMatrix& W) {
  return W.kind == QMatrix::Kind::Affine && W.bits == 4 && (W.group == 64 || W.group == 32) && W.cols % 64 == 0 &&
         W.cols / 64 <= 256;
}

void matmul(const QMatrix& W, const float* X, int n, float* Y, bool precise) {
  const MatJob job{&W, X, n, Y};
  matmul_batch(&job, 1, precise);
}

void matmul_batch(const MatJob* jobs, int count, bool precise) {
  ThreadPool& pool = ThreadPool::global();
  // Activations quantised once per distinct (X, n, cols); owned by the calling thread, read by the workers.
  thread_local std::vector<QuantX> tqs;
  thread_local std::vector<int> qidx;      // [count] index into tqs, -1 for the generic path
  thread_local std::vector<int64_t> first; // [count + 1] first task of each job
  thread_local std::vector<int64_t> blk;   // [count] rows per task
  std::vector<QuantX>& qs = tqs;
  if (qs.size() < static_cast<size_t>(count)) qs.resize(count);
  qidx.assign(count, -1);
  first.assign(count + 1, 0);
  blk.assign(count, 1);
  thread_local std::vector<int> tqsrc;     // job whose X each distinct quantisation reads
  std::vector<int>& qsrc = tqsrc;
  if (qsrc.size() < static_cast<size_t>(count)) qsrc.resize(count);
  int nq = 0;
  int64_t quant_elems = 0;
  int64_t total_rows = 0;
  for (int j = 0; j < count; ++j) total_rows += jobs[j].W->rows;
  // Rows per task. Decode (every job one activation row): up to 512 rows, a whole MoE expert's gate or up
  // matrix, so that each task streams a long run of memory (64-row tasks: 28 ms of MoE per token, 512: 21 ms);
  // ~4 tasks per thread at least. Prefill: 16..64 rows (the tile GEMM's work per row is n times larger).
  int max_n = 0;
  for (int j = 0; j < count; ++j) max_n = std::max(max_n, jobs[j].n);
  const int64_t cap = max_n < kTileMinRows ? 512 : 64;
  const int64_t per = max_n < kTileMinRows ? 4 : 8;
  const int64_t block = std::max<int64_t>(4, std::min<int64_t>(cap, total_rows / (per * pool.size()) + 1) / 4 * 4);
  thread_local std::vector<char> thalves;  // distinct quantisation k also needs the halves' sums (group 32)
  std::vector<char>& halves = thalves;
  halves.assign(count, 0);
  const Isa isa = active_isa();
  for (int j = 0; j < count; ++j) {
    const MatJob& jb = jobs[j];
    // quantised activations: the 4-bit matrices, and Q6_K blocks on the AVX-512 tier
    if (is_q4_integer(*jb.W) || (isa == Isa::Avx512 && q6k_int_supported(*jb.W))) {
      for (int k = 0; k < j && qidx[j] < 0; ++k)
        if (qidx[k] >= 0 && jobs[k].X == jb.X && jobs[k].n == jb.n && jobs[k].W->cols == jb.W->cols) qidx[j] = qidx[k];
      if (qidx[j] < 0) {
        qsrc[nq] = j;
        quant_elems += static_cast<int64_t>(jb.n) * jb.W->cols;
        qidx[j] = nq++;
      }
      halves[size_t(qidx[j])] |= jb.W->kind == QMatrix::Kind::Affine && jb.W->group == 32;
    }
    // the tile GEMM takes 16 weight rows at a time
    blk[j] = (qidx[j] >= 0 && jb.n >= kTileMinRows) ? (block + 15) / 16 * 16 : block;
    first[j + 1] = first[j] + (jb.W->rows + blk[j] - 1) / blk[j];
  }
  for (int k = 0; k < nq; ++k) {
    const MatJob& jb = jobs[qsrc[k]];
    quantize_x_prepare(jb.n, static_cast<int>(jb.W->cols), precise, qs[k], halves[size_t(k)] != 0);
  }
  // Quantise the activations: in place on this thread when small (decode), else rows in parallel.
  constexpr int kQuantRows = 8;  // rows per task
  if (quant_elems < (1 << 16) || pool.size() == 1) {
    for (int k = 0; k < nq; ++k) {
      const MatJob& jb = jobs[qsrc[k]];
      quantize_x_rows(jb.X, 0, jb.n, static_cast<int>(jb.W->cols), precise, qs[k]);
    }
  } else {
    thread_local std::vector<int> qfirst;  // [nq + 1] first task of each quantisation
    qfirst.assign(nq + 1, 0);
    for (int k = 0; k < nq; ++k) qfirst[k + 1] = qfirst[k] + (jobs[qsrc[k]].n + kQuantRows - 1) / kQuantRows;
    const int* qf = qfirst.data();
    const int* qsj = qsrc.data();
    pool.parallel_for(qfirst[nq], [&](int t, int) {
      const int k = static_cast<int>(std::upper_bound(qf, qf + nq + 1, t) - qf) - 1;
      const MatJob& jb = jobs[qsj[k]];
      const int i0 = (t - qf[k]) * kQuantRows, i1 = std::min(jb.n, i0 + kQuantRows);
      quantize_x_rows(jb.X, i0, i1, static_cast<int>(jb.W->cols), precise, qs[k]);
    });
  }
  const int64_t* fst = first.data();
  const int64_t* bl = blk.data();
  const int* qi = qidx.data();
  pool.parallel_for(static_cast<int>(first[count]), [&](int t, int) {
    const int j = static_cast<int>(std::upper_bound(fst, fst + count + 1, t) - fst) - 1;
    const MatJob& jb = jobs[j];
    const int64_t r0 = (t - fst[j]) * bl[j], r1 = std::min(jb.W->rows, r0 + bl[j]);
    if (qi[j] < 0) {
      if (isa == Isa::Avx2 && q6k_supported(*jb.W))
        q6k_rows_avx2(*jb.W, r0, r1, jb.X, jb.n, jb.Y);
      else if (isa == Isa::Avx512 && q8_bf16_supported(*jb.W))
        q8_bf16_rows_avx512(*jb.W, r0, r1, jb.X, jb.n, jb.Y);
      else if (isa == Isa::Avx2 && q8_bf16_supported(*jb.W))
        q8_bf16_rows_avx2(*jb.W, r0, r1, jb.X, jb.n, jb.Y);
      else
        generic_rows(*jb.W, r0, r1, jb.X, jb.n, jb.Y);
    } else if (jb.W->kind == QMatrix::Kind::Ggml) {  // Q6_K (outliers added inside)
      q6k_rows_avx512(*jb.W, r0, r1, qs[qi[j]], precise, jb.Y);
    } else {
      if (isa == Isa::Avx512) q4_rows_avx512(*jb.W, r0, r1, qs[qi[j]], precise, jb.Y);
      else if (isa == Isa::Avx2) q4_rows_avx2(*jb.W, r0, r1, qs[qi[j]], precise, jb.Y);
      else q4_rows_portable(*jb.W, r0, r1, qs[qi[j]], precise, jb.Y);
      add_outliers(*jb.W, r0, r1, qs[qi[j]], jb.Y);
    }
  });
}

}  // namespace lily::fast
