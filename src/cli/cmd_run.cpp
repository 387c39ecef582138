// `lily run`: generation from a prompt (greedy unless --temperature; sampled by Backend::decode_sample, on the GPU
// for the CUDA backend, or by speculative decoding with the MTP block: --mtp K|off, cli/mtp_args.h), streamed to
// stdout, then prompt and decode speed (and the drafts accepted) on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "app/make_backend.h"
#include "cli/model_assets.h"
#include "cli/mtp_args.h"
#include "chat/template.h"
#include "core/progress.h"
#include "cli/model_source.h"
#include "cli/registry.h"
#include "core/error.h"
#include "engine/backend.h"
#include "engine/speculative.h"
#include "engine/step_sampler.h"
#include "tokenizer/tokenizer.h"

namespace lily {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> stop_ids(const ModelConfig& c, const Tokenizer& tok) {
  std::vector<int32_t> s(c.eos_ids.begin(), c.eos_ids.end());
  for (const char* t : {"<|im_end|>", "<|endoftext|>"}) {
    int32_t id = tok.token_to_id(t);
    if (id >= 0) s.push_back(id);
  }
  return s;
}

int run(const Args& a) {
  a.check_known({"model", "prompt", "chat", "max-tokens", "backend", "prefill-chunk", "no-think", "ctx",
                 "temperature", "top-p", "top-k", "min-p", "seed", "mtp", "mtp-from"});
  if (!a.has("prompt")) throw Error("--prompt TEXT is required");
  const std::string dir = model_dir_or_demo(a);
  auto w = load_model(dir);
  const MtpChoice mtp_choice = load_mtp_for(a, *w);
  auto tok = load_model_tokenizer(dir);
  auto be = make_backend(a.get("backend", "auto"), w);
  const int mtp_k = mtp_for_backend(mtp_choice, *be, "run");
  std::string text = a.get("prompt");
  if (a.has("chat")) {
    nlohmann::ordered_json ctx;
    ctx["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}});
    ctx["add_generation_prompt"] = true;
    ctx["enable_thinking"] = !a.has("no-think");
    text = load_model_template(dir).render(ctx);
  }
  std::vector<int32_t> ids = tok->encode(text);
  if (ids.empty()) throw Error("the prompt encodes to no tokens");
  const int max_new = static_cast<int>(a.get_int("max-tokens", 128));
  const int ctx_len = static_cast<int>(a.get_int("ctx", static_cast<long>(ids.size()) + max_new + 1));
  if (static_cast<int>(ids.size()) + max_new > ctx_len)
    throw Error("prompt (" + std::to_string(ids.size()) + " tokens) + --max-tokens " + std::to_string(max_new) +
                " exceed the context of " + std::to_string(ctx_len));
  const auto stops = stop_ids(w->cfg, *tok);
  ForwardOptions opt;
  opt.prefill_chunk = be->prefill_chunk_or_default(static_cast<int>(a.get_int("prefill-chunk", 0)));
  auto st = be->new_state(ctx_len);
  const int V = w->cfg.vocab;
  std::vector<float> logits(V);
  std::optional<Progress> bar;  // long prompts (several chunks): drawn only on a terminal
  if (ids.size() > 2 * static_cast<size_t>(opt.prefill_chunk)) {
    bar.emplace("prefill", ids.size());
    opt.progress = [&](int done, int) { bar->set(static_cast<uint64_t>(done)); };
  }
  MtpCarry carry;  // with --mtp: the MTP rows of the prompt and its last hidden state
  if (mtp_k > 0) opt.on_hidden = mtp_prefill_hook(*be, *st, ids, carry);
  auto t0 = Clock::now();
  be->forward(*st, ids.data(), static_cast<int>(ids.size()), 1, logits.data(), opt);
  if (bar) bar->finish();
  auto t1 = Clock::now();
  StreamDecoder dec(*tok);
  SamplerParams sp;
  sp.temperature = float(a.get_double("temperature", 0.0));
  sp.top_p = float(a.get_double("top-p", 1.0));
  sp.top_k = int(a.get_int("top-k", 0));
  sp.min_p = float(a.get_double("min-p", 0.0));
  sp.has_seed = a.has("seed");
  sp.seed = uint64_t(a.get_int("seed", 0));
  StepSampler smp(sp, ids, V);
  MtpStats mtp_stats;
  int generated = 0;
  auto emit = [&](int32_t next) {
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) return false;
    ++generated;
    std::fputs(dec.push(next).c_str(), stdout);
    std::fflush(stdout);
    return generated < max_new;
  };
  if (max_new > 0) {
    const int32_t first = smp.sample(logits.data());
    if (emit(first) && max_new > 1) {
      if (mtp_k > 0) {
        MtpConfig mc;
        mc.k = mtp_k;
        mtp_decode(*be, *st, smp, first, max_new - 1, emit, nullptr, &carry, mc, &mtp_stats);
      } else {
        be->decode_sample(*st, smp, first, max_new - 1, emit);
      }
    }
  }
  std::fputs(dec.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  auto t2 = Clock::now();
  double ps = std::chrono::duration<double>(t1 - t0).count(), ds = std::chrono::duration<double>(t2 - t1).count();
  std::string mtp_note;
  if (mtp_stats.drafted > 0)
    mtp_note = "; mtp k=" + std::to_string(mtp_k) + ": " + std::to_string(mtp_stats.accepted) + "/" +
               std::to_string(mtp_stats.drafted) + " drafts accepted" +
               (mtp_stats.switched_off ? " (then off: no gain)" : "");
  std::fprintf(stderr, "[%s] prompt %zu tokens in %.3f s (%.1f tok/s); generated %d tokens in %.3f s (%.1f tok/s)%s\n",
               be->name().c_str(), ids.size(), ps, ids.size() / std::max(ps, 1e-9), generated, ds,
               generated / std::max(ds, 1e-9), mtp_note.c_str());
  return 0;
}

}  // namespace

LILY_COMMAND("run", "generation: --prompt TEXT [--chat] [--max-tokens N] [--model DIR] [--temperature T --top-p P "
             "--top-k K --min-p M --seed S] [--mtp K|off] [--mtp-from DIR]", run,
             {"chat", "no-think"});

}  // namespace lily
