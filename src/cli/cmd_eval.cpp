// `lily eval (--model DIR | --synthetic P) --ref F.safetensors`: teacher-forced consistency of this engine
// against reference logits (prompt_ids / prompt_logits, as in tests/fixtures/*/reference-*.safetensors or
// written by `lily logits`): top-1 agreement, max |dlogit|, mean KL; bounds (--min-top1, --max-mean-kl, --max-abs)
// turn it into a gate (exit status 1 naming each bound missed).
// `lily perplexity --model DIR --text F | (--model DIR | --synthetic P) --ids F [--window N --stride S]`: sliding-window perplexity.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/make_backend.h"
#include "cli/model_args.h"
#include "cli/registry.h"
#include "core/error.h"
#include "eval/logit_metrics.h"
#include "eval/teacher_forced.h"
#include "io/text_file.h"
#include "tokenizer/tokenizer.h"

namespace lily {
namespace {

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream f(path);
  if (!f) throw Error("cannot create " + path);
  f << j.dump(2) << "\n";
  if (!f) throw Error("writing " + path + " failed");
}

// The bounds of `lily eval`: each given one is checked against the prompt's figures; a miss is named with the
// figure and the bound. Non-finite logits fail whenever any bound is given.
struct EvalBounds {
  bool any = false;
  bool has_top1 = false, has_kl = false, has_abs = false;
  double min_top1 = 0, max_mean_kl = 0, max_abs = 0;
};

EvalBounds parse_bounds(const Args& a) {
  EvalBounds b;
  if (a.has("max-kl") && a.has("max-mean-kl")) throw Error("--max-kl is another name of --max-mean-kl: pass one");
  const char* kl_flag = a.has("max-kl") ? "max-kl" : "max-mean-kl";
  b.has_top1 = a.has("min-top1");
  b.has_kl = a.has(kl_flag);
  b.has_abs = a.has("max-abs");
  if (b.has_top1) b.min_top1 = a.get_double("min-top1", 0);
  if (b.has_kl) b.max_mean_kl = a.get_double(kl_flag, 0);
  if (b.has_abs) b.max_abs = a.get_double("max-abs", 0);
  if (b.has_top1 && !(b.min_top1 >= 0 && b.min_top1 <= 1))
    throw Error("--min-top1 must be between 0 and 1 (a fraction of positions)");
  if (b.has_kl && !(b.max_mean_kl >= 0)) throw Error(std::string("--") + kl_flag + " must be >= 0");
  if (b.has_abs && !(b.max_abs >= 0)) throw Error("--max-abs must be >= 0");
  b.any = b.has_top1 || b.has_kl || b.has_abs;
  return b;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// The misses, each as "figure value <op> --flag bound".
std::vector<std::string> check_bounds(const EvalBounds& b, const LogitComparison& c) {
  std::vector<std::string> failed;
  if (!b.any) return failed;
  if (c.non_finite > 0) failed.push_back(std::to_string(c.non_finite) + " non-finite logits (inf or NaN)");
  if (b.has_top1 && !(c.top1_agreement >= b.min_top1))
    failed.push_back("top-1 agreement " + fmt("%.4f", c.top1_agreement) + " < --min-top1 " + fmt("%g", b.min_top1));
  if (b.has_kl && !(c.mean_kl <= b.max_mean_kl))
    failed.push_back("mean KL " + fmt("%.4g", c.mean_kl) + " > --max-mean-kl " + fmt("%g", b.max_mean_kl));
  if (b.has_abs && !(c.max_abs_err <= b.max_abs))
    failed.push_back("max |dlogit| " + fmt("%.4g", c.max_abs_err) + " > --max-abs " + fmt("%g", b.max_abs));
  return failed;
}

int run_eval(const Args& a) {
  auto known = model_flags();
  for (const char* k : {"ref", "backend", "prefill-chunk", "min-top1", "max-kl", "max-mean-kl", "max-abs", "json"})
    known.push_back(k);
  a.check_known(known);
  const EvalBounds bounds = parse_bounds(a);
  if (!a.has("ref")) throw Error("--ref F.safetensors (prompt_ids, prompt_logits) is required");
  auto ref = load_reference_logits(a.get("ref"));
  auto w = open_model(a);
  if (w->cfg.vocab != ref.vocab)
    throw Error(a.get("ref") + " has logits over " + std::to_string(ref.vocab) + " ids, the model's vocab is " +
                std::to_string(w->cfg.vocab));
  auto be = make_backend(a.get("backend", "auto"), w);
  auto ours = teacher_forced_logits(*be, ref.ids, int(a.get_int("prefill-chunk", 0)));
  std::vector<int32_t> next(ref.ids.begin() + (ref.ids.empty() ? 0 : 1), ref.ids.end());
  const int L = int(ref.ids.size());
  auto c = compare_logits(ref.logits.data(), ours.data(), L, ref.vocab, next);

  const int chunk = be->prefill_chunk_or_default(int(a.get_int("prefill-chunk", 0)));
  std::printf("eval %s vs %s (%s), %d positions, prefill chunk %d\n", model_label(a).c_str(), a.get("ref").c_str(),
              be->name().c_str(), L, chunk);
  std::printf("  top-1 agreement  %.4f\n  max |dlogit|     %.6g\n  RMS dlogit       %.6g\n", c.top1_agreement,
              c.max_abs_err, c.rms_err);
  std::printf("  KL(ref||ours)    mean %.6g  max %.6g\n  perplexity       ref %.6g  ours %.6g (%d next tokens)\n",
              c.mean_kl, c.max_kl, c.ppl_ref, c.ppl_ours, c.scored);
  if (c.non_finite > 0) std::printf("  non-finite       %lld logits are inf or NaN\n", (long long)c.non_finite);

  // the long prompt, when the reference has one: one whole prefill, its last rows against the reference's
  LogitComparison lc;
  const bool has_long = ref.long_rows > 0;
  if (has_long) {
    const int N = int(ref.long_ids.size()), R = ref.long_rows;
    std::vector<float> last(size_t(R) * size_t(ref.vocab));
    auto st = be->new_state(N);
    ForwardOptions fo;
    fo.prefill_chunk = int(a.get_int("prefill-chunk", 0));
    be->forward(*st, ref.long_ids.data(), N, R, last.data(), fo);
    lc = compare_logits(ref.long_logits.data(), last.data(), R, ref.vocab, {});
    std::printf("  long prompt      %d tokens, last %d rows: top-1 agreement %.4f, max |dlogit| %.6g, RMS %.6g\n", N,
                R, lc.top1_agreement, lc.max_abs_err, lc.rms_err);
  }

  const std::vector<std::string> failed = check_bounds(bounds, c);
  if (a.has("json")) {
    nlohmann::ordered_json j = {{"schema", "lily-eval-1"},
                                {"model", model_label(a)},
                                {"reference", a.get("ref")},
                                {"backend", be->name()},
                                {"positions", L},
                                {"prefill_chunk", chunk},
                                {"top1_agreement", c.top1_agreement},
                                {"max_abs_err", c.max_abs_err},
                                {"rms_err", c.rms_err},
                                {"mean_kl", c.mean_kl},
                                {"max_kl", c.max_kl},
                                {"ppl_ref", c.ppl_ref},
                                {"ppl_ours", c.ppl_ours},
                                {"scored", c.scored},
                                {"non_finite", c.non_finite},
                                {"long_prompt", has_long ? nlohmann::ordered_json{{"tokens", ref.long_ids.size()},
                                                                                  {"rows", ref.long_rows},
                                                                                  {"top1_agreement", lc.top1_agreement},
                                                                                  {"max_abs_err", lc.max_abs_err},
                                                                                  {"rms_err", lc.rms_err}}
                                                         : nlohmann::ordered_json(nullptr)},
                                {"failed", failed},
                                {"pass", failed.empty()}};
    write_json(a.get("json"), j);
  }
  for (const auto& f : failed) std::fprintf(stderr, "lily eval: bound not met: %s\n", f.c_str());
  return failed.empty() ? 0 : 1;
}

std::vector<int32_t> read_ids_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot open " + path);
  std::vector<int32_t> ids;
  std::string tok;
  while (f >> tok) {
    for (auto& ch : tok)
      if (ch == ',' || ch == '[' || ch == ']') ch = ' ';
    std::stringstream ss(tok);
    long v;
    while (ss >> v) ids.push_back(int32_t(v));
    if (!ss.eof()) throw Error(path + ": expected token ids (integers separated by spaces or commas), got '" + tok + "'");
  }
  return ids;
}

int run_perplexity(const Args& a) {
  auto known = model_flags();
  for (const char* k : {"ids", "text", "backend", "window", "stride", "prefill-chunk", "json"}) known.push_back(k);
  a.check_known(known);
  if (a.has("text") == a.has("ids")) throw Error("pass --text F (tokenized with the model's tokenizer.json) or --ids F");
  std::vector<int32_t> ids;
  std::string src = a.has("text") ? a.get("text") : a.get("ids");
  if (a.has("text")) {
    if (!a.has("model")) throw Error("--text needs --model DIR (its tokenizer.json); with --synthetic use --ids F");
    auto tok = Tokenizer::load(a.get("model") + "/tokenizer.json");
    ids = tok->encode(read_text_file(src));
  } else {
    ids = read_ids_file(src);
  }
  if (ids.size() < 2) throw Error(src + ": need at least 2 tokens");
  auto w = open_model(a);
  for (auto id : ids)
    if (id < 0 || id >= w->cfg.vocab) throw Error(src + ": id " + std::to_string(id) + " outside the vocabulary");
  auto be = make_backend(a.get("backend", "auto"), w);
  int window = int(a.get_int("window", 2048));
  int stride = int(a.get_int("stride", window / 2));
  auto r = windowed_perplexity(*be, ids, window, stride, int(a.get_int("prefill-chunk", 0)));
  std::printf("perplexity %.6g over %lld tokens (%d windows of %d, stride %d)\n", r.ppl(), (long long)r.scored,
              r.windows, window, stride);
  if (a.has("json"))
    write_json(a.get("json"), {{"schema", "lily-perplexity-1"}, {"model", model_label(a)}, {"backend", be->name()},
                               {"perplexity", r.ppl()}, {"nll_sum", r.nll_sum}, {"scored", r.scored},
                               {"windows", r.windows}, {"window", window}, {"stride", stride}});
  return 0;
}

LILY_COMMAND("eval", "teacher-forced logits vs a reference file: top-1, KL, logit error, perplexity", run_eval, {});
LILY_COMMAND("perplexity", "sliding-window perplexity of a text or token ids (--text F | --ids F) [--window N --stride S]",
             run_perplexity, {});

}  // namespace
}  // namespace lily
