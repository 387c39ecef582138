#include "eval/teacher_forced.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "eval/logit_metrics.h"
#include "io/safetensors.h"

namespace lily {

std::vector<float> teacher_forced_logits(Backend& be, const std::vector<int32_t>& ids, int chunk) {
  const int V = be.config().vocab, n = int(ids.size());
  std::vector<float> out(size_t(n) * size_t(V));
  if (n == 0) return out;
  auto st = be.new_state(n + 1);
  ForwardOptions fo;
  fo.prefill_chunk = std::max(0, chunk);  // 0: the backend's own chunk (CUDA: the whole prompt up to 4096 tokens)
  be.forward(*st, ids.data(), n, n, out.data(), fo);
  return out;
}

ReferenceLogits load_reference_logits(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  const TensorView* ids = f->find("prompt_ids");
  const TensorView* lg = f->find("prompt_logits");
  if (!ids || !lg) throw Error(path + ": a reference file needs prompt_ids (i32 [L]) and prompt_logits (f32 [L, V])");
  if (ids->dtype != DType::I32 || ids->shape.size() != 1)
    throw Error(path + ": prompt_ids must be I32 [L], got " + dtype_name(ids->dtype) + " " + shape_str(ids->shape));
  if (lg->dtype != DType::F32 || lg->shape.size() != 2 || lg->shape[0] != ids->shape[0])
    throw Error(path + ": prompt_logits must be F32 [" + std::to_string(ids->shape[0]) + ", V], got " +
                dtype_name(lg->dtype) + " " + shape_str(lg->shape));
  ReferenceLogits r;
  r.ids.resize(size_t(ids->shape[0]));
  std::memcpy(r.ids.data(), ids->data, ids->nbytes);
  r.logits.resize(size_t(lg->numel()));
  std::memcpy(r.logits.data(), lg->data, lg->nbytes);
  r.vocab = int(lg->shape[1]);
  const TensorView* lids = f->find("long_ids");
  const TensorView* llg = f->find("long_logits_last8");
  if (lids && llg) {
    if (lids->dtype != DType::I32 || lids->shape.size() != 1)
      throw Error(path + ": long_ids must be I32 [N], got " + dtype_name(lids->dtype) + " " + shape_str(lids->shape));
    if (llg->dtype != DType::F32 || llg->shape.size() != 2 || llg->shape[1] != lg->shape[1] ||
        llg->shape[0] > lids->shape[0])
      throw Error(path + ": long_logits_last8 must be F32 [rows <= " + std::to_string(lids->shape[0]) + ", " +
                  std::to_string(r.vocab) + "], got " + dtype_name(llg->dtype) + " " + shape_str(llg->shape));
    r.long_ids.resize(size_t(lids->shape[0]));
    std::memcpy(r.long_ids.data(), lids->data, lids->nbytes);
    r.long_logits.resize(size_t(llg->numel()));
    std::memcpy(r.long_logits.data(), llg->data, llg->nbytes);
    r.long_rows = int(llg->shape[0]);
  }
  return r;
}

double PerplexityResult::ppl() const { return perplexity(nll_sum, scored); }

PerplexityResult windowed_perplexity(Backend& be, const std::vector<int32_t>& ids, int window, int stride, int chunk) {
  if (window < 2) throw Error("--window must be at least 2");
  if (stride < 1 || stride > window) throw Error("--stride must be between 1 and the window size");
  chunk = std::max(1, chunk);
  const int V = be.config().vocab;
  const int64_t n = int64_t(ids.size());
  PerplexityResult r;
  std::vector<float> logits(size_t(chunk) * size_t(V));  // one chunk's logits at a time: memory stays bounded
  ForwardOptions fo;
  fo.prefill_chunk = chunk;
  int64_t scored_until = 1;  // ids[0] has no prediction
  for (int64_t begin = 0; scored_until < n; begin += stride) {
    const int64_t end = std::min<int64_t>(begin + window, n);
    const int64_t first_target = std::max(scored_until, begin + 1);
    auto st = be.new_state(int(end - begin) + 1);
    for (int64_t c0 = begin; c0 < end; c0 += chunk) {
      const int cn = int(std::min<int64_t>(chunk, end - c0));
      be.forward(*st, ids.data() + c0, cn, cn, logits.data(), fo);
      for (int i = 0; i < cn; ++i) {  // logits at position p predict ids[p + 1]
        const int64_t target = c0 + i + 1;
        if (target < first_target || target >= end) continue;
        r.nll_sum += neg_log_prob(logits.data() + size_t(i) * size_t(V), V, ids[size_t(target)]);
        ++r.scored;
      }
    }
    scored_until = std::max(scored_until, end);
    ++r.windows;
    if (end == n) break;
  }
  return r;
}

}  // namespace lily
