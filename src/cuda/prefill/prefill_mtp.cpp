// PrefillRunner's multi-token-prediction block (see prefill_runner.h): the input stage
// x = fc(concat(RMSNorm(embed(ids); norm_e), RMSNorm(hidden; norm_h))), the block's decoder layer through the same
// attention and MoE code as the main layers (its KV cache is the one full-attention slot of the state passed in),
// then RMSNorm(.; norm) and the shared lm_head.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/prefill/prefill_runner.h"

namespace lily::cuda {

void PrefillRunner::set_mtp(const PrefillMtp& m, const std::function<void*(size_t)>& alloc) {
  if (!m.layer || !m.layer->is_full || !m.norm_e || !m.norm_h || !m.norm)
    throw Error("prefill: incomplete multi-token-prediction block");
  const ModelConfig& c = *m_.cfg;
  if (m.fc.rows != c.hidden || m.fc.cols != 2 * c.hidden)
    throw Error("prefill: MTP fc is " + std::to_string(m.fc.rows) + "x" + std::to_string(m.fc.cols) + ", expected " +
                std::to_string(c.hidden) + "x" + std::to_string(2 * c.hidden));
  mtp_ = m;
  mtp_precise_ = false;
  if (prec_ != kPrecBF16 && m.layer->q_norm && m.layer->k_norm) {  // as the main layers (constructor)
    std::vector<float> wq(size_t(c.head_dim)), wk(size_t(c.head_dim));
    LILY_CUDA_CHECK(cudaMemcpy(wq.data(), m.layer->q_norm, wq.size() * 4, cudaMemcpyDeviceToHost));
    LILY_CUDA_CHECK(cudaMemcpy(wk.data(), m.layer->k_norm, wk.size() * 4, cudaMemcpyDeviceToHost));
    double mx = 0;
    for (size_t j = 0; j < wq.size(); ++j) mx = std::max({mx, std::fabs(double(wq[j])), std::fabs(double(wk[j]))});
    mtp_precise_ = std::sqrt(double(c.head_dim)) * mx * 1.01 < 60000.0;
  }
  const size_t N = size_t(max_chunk_), H = size_t(c.hidden);
  auto f32 = [&](size_t n) { return static_cast<float*>(alloc(std::max<size_t>(n, 4) * 4)); };
  auto b16 = [&](size_t n) { return static_cast<uint16_t*>(alloc(std::max<size_t>(n, 8) * 2)); };
  hid_ = f32(N * H);
  cat_ = f32(N * 2 * H);
  hout_ = f32(N * H);
  cata_ = ActRows{};
  cata_.hi = b16(N * 2 * H);
  if (prec_ != kPrecBF16) cata_.scale = f32(N);
  if (prec_ == kPrecSplit) cata_.lo = b16(N * 2 * H);
}

void PrefillRunner::run_mtp(const PrefillState& st, const int32_t* ids, const float* hidden, int n, int pos0,
                            int n_logits, float* logits, float* hidden_out, cudaStream_t s) {
  if (!mtp_.layer) throw Error("prefill: no multi-token-prediction block (set_mtp)");
  if (n <= 0) return;
  if (n > max_chunk_) throw Error("prefill: MTP rows more than allocated");
  if (n_logits < 0 || n_logits > n) throw Error("prefill: bad MTP logit rows");
  const ModelConfig& c = *m_.cfg;
  const int H = c.hidden;
  const float eps = c.rms_eps;
  rows_first_ = n < kColsFirstRows;
  LILY_CUDA_CHECK(cudaMemcpyAsync(ids_, ids, size_t(n) * 4, cudaMemcpyHostToDevice, s));
  LILY_CUDA_CHECK(cudaMemcpyAsync(hid_, hidden, size_t(n) * H * 4, cudaMemcpyHostToDevice, s));
  prefill_embed(m_.embed, ids_, n, x_, s);
  prefill_rmsnorm_f32(x_, H, mtp_.norm_e, n, H, eps, cat_, 2 * H, s);
  prefill_rmsnorm_f32(hid_, H, mtp_.norm_h, n, H, eps, cat_ + H, 2 * H, s);
  prefill_quant_rows(cat_, 2 * H, n, 2 * H, prec_, cata_, s);
  gemm(cata_, 2 * H, n, mtp_.fc, x_, H, kGemmStore, kRoleAttnProj, s);
  const DLayer& d = *mtp_.layer;
  prefill_rmsnorm_act(x_, H, d.in_norm, n, H, eps, prec_, xa_, s);
  attn_layer(d, st, n, pos0, s);
  prefill_rmsnorm_act(x_, H, d.post_norm, n, H, eps, prec_, xa_, s);
  moe_layer(d, n, s);
  head(mtp_.norm, n, n_logits, logits, hidden_out, s);
  LILY_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace lily::cuda
