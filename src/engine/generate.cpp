#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/error.h"
#include "engine/json_reply.h"
#include "engine/vocab_trie.h"
#include "engine/step_sampler.h"
#include "engine/stop_strings.h"
#include "engine/session_cache.h"
#include "engine/speculative.h"

namespace lily {
namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

bool delta_empty(const ParsedDelta& d) {
  return d.reasoning.empty() && d.content.empty() && d.tool_calls.empty() && d.dropped_tool_calls.empty();
}

void append(ParsedDelta& into, ParsedDelta&& d) {
  into.reasoning += d.reasoning;
  into.content += d.content;
  for (auto& t : d.tool_calls) into.tool_calls.push_back(std::move(t));
  for (int i : d.dropped_tool_calls) into.dropped_tool_calls.push_back(i);
}

}  // namespace

Generator::Generator(Backend& be, const Tokenizer& tok, SessionCache* cache, int ctx, int prefill_chunk)
    : be_(be), tok_(tok), cache_(cache), ctx_(ctx), prefill_chunk_(prefill_chunk) {
  for (int id : be.config().eos_ids) stop_ids_.push_back(id);
  for (const char* t : {"<|im_end|>", "<|endoftext|>"}) {
    int32_t id = tok.token_to_id(t);
    if (id >= 0 && std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) stop_ids_.push_back(id);
  }
}

JsonReplyGate::TokenText Generator::json_token_text() const {
  const Tokenizer& tok = tok_;
  return [&tok](int32_t id) { return tok.is_special(id) ? std::string() : tok.token_bytes(id); };
}

void Generator::set_mtp(int k) {
  if (k < 0) throw Error("--mtp: expected a draft count >= 0, got " + std::to_string(k));
  if (k > 0 && !be_.mtp_available()) throw Error(be_.mtp_unavailable_reason());
  mtp_k_ = k;
}

void Generator::save_reply_snapshot() {
  if (!reply_state_ || !cache_) return;
  std::unique_ptr<SeqState> st = std::move(reply_state_);
  std::vector<float> logits = std::move(reply_logits_);
  reply_logits_.clear();
  if (logits.empty()) {  // the last token is not consumed yet
    logits.resize(static_cast<size_t>(be_.config().vocab));
    ForwardOptions fo;
    be_.forward(*st, &reply_tokens_.back(), 1, 1, logits.data(), fo);
  }
  cache_->insert(reply_tokens_, reply_key_, *st, std::move(logits));
  reply_tokens_.clear();
}

GenResult Generator::run(const GenJob& job, const std::function<void(GenChunk&&)>& emit,
                         const std::function<bool()>& cancelled) {
  reply_state_.reset();
  const int n = static_cast<int>(job.prompt.size());
  if (n == 0) throw Error("empty prompt");
  if (n >= ctx_) throw Error("prompt of " + std::to_string(n) + " tokens does not fit the context of " + std::to_string(ctx_));
  const int V = be_.config().vocab;
  GenResult res;
  res.prompt_tokens = n;
  ForwardOptions fo;
  fo.prefill_chunk = prefill_chunk_;
  fo.cancelled = cancelled;

  // Prefill, resuming from the longest matching snapshot.
  auto t0 = Clock::now();
  std::unique_ptr<SeqState> st;
  std::vector<float> logits(static_cast<size_t>(V));
  if (cache_) {
    CacheHit hit = cache_->lookup(job.prompt, job.cache_key, ctx_);
    if (hit.state && static_cast<int>(hit.logits.size()) == V) {
      st = std::move(hit.state);
      res.cached_tokens = hit.n_tokens;
      logits = std::move(hit.logits);
    }
  }
  if (!st) st = be_.new_state(ctx_);
  const bool fast_path = !job.logprobs && !job.json_object && !(job.thinking_budget > 0 && job.chat &&
                                                                 job.parser.thinking_open_at_start);
  MtpCarry carry;
  if (mtp_k_ > 0 && fast_path) fo.on_hidden = mtp_prefill_hook(be_, *st, job.prompt, carry);
  if (res.cached_tokens < n) {
    std::vector<int> bounds;
    if (cache_)
      for (int b : job.snapshot_at)
        if (b > res.cached_tokens && b < n) bounds.push_back(b);
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    bounds.push_back(n);
    for (int b : bounds) {
      const int from = st->pos;
      be_.forward(*st, job.prompt.data() + from, b - from, 1, logits.data(), fo);
      if (cache_) {
        std::vector<int32_t> head(job.prompt.begin(), job.prompt.begin() + b);
        cache_->insert(head, job.cache_key, *st, logits);
      }
    }
  }
  auto t1 = Clock::now();
  res.prefill_s = secs(t0, t1);

  // Decode.
  StreamDecoder dec(tok_);
  StopMatcher stops(job.stop);
  std::optional<OutputParser> parser;
  if (job.chat) parser.emplace(job.parser);
  std::optional<JsonReplyGate> json;
  if (job.json_object)
    json.emplace(json_token_text(), stop_ids_, job.chat && job.parser.thinking_open_at_start && !job.json_after_forced,
                 job.json_schema);
  // The end-of-turn token that closes a constrained reply (what the chat template renders after it).
  int32_t end_id = stop_ids_.empty() ? -1 : stop_ids_.front();
  if (int32_t im_end = tok_.token_to_id("<|im_end|>");
      im_end >= 0 && std::find(stop_ids_.begin(), stop_ids_.end(), im_end) != stop_ids_.end())
    end_id = im_end;
  std::vector<int32_t> generated;
  GenChunk pending;          // output not yet emitted
  bool tool_limit = false;   // single_tool_call and a second call began

  auto take = [&](ParsedDelta&& d) {
    if (job.single_tool_call) {
      auto& tc = d.tool_calls;
      auto it = std::remove_if(tc.begin(), tc.end(), [](const auto& t) { return t.index > 0; });
      if (it != tc.end()) tool_limit = true;
      tc.erase(it, tc.end());
    }
    append(pending.delta, std::move(d));
  };
  auto feed = [&](const std::string& text) {
    if (text.empty()) return;
    if (parser) {
      take(parser->push(text));
    } else {
      pending.delta.content += text;
      res.content += text;
    }
  };
  auto flush_pending = [&](bool force) {
    if (delta_empty(pending.delta) && !(force && !pending.tokens.empty())) return;
    emit(std::move(pending));
    pending = GenChunk{};
  };

  if (parser && !job.forced_text.empty()) {
    take(parser->push(job.forced_text));
    flush_pending(false);
  }

  // A forced JSON tool call is closed: release what is held back, then the closing tag (once).
  bool suffix_fed = false;
  auto feed_suffix = [&] {
    if (job.json_suffix.empty() || suffix_fed) return;
    suffix_fed = true;
    StopMatcher::Out so = stops.push(dec.flush());
    feed(so.text);
    feed(stops.flush());
    feed(job.json_suffix);
  };

  std::string finish = "length";
  bool eos = false;
  const int budget = std::min(job.max_tokens, ctx_ - n);
  // One sampled token: false ends the reply (stop token, stop string, tool-call limit).
  auto handle = [&](int32_t id, SampleResult* s) {
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
      finish = "stop";
      eos = true;
      generated.push_back(id);  // consumed by the reply snapshot, not counted as output
      return false;
    }
    generated.push_back(id);
    if (s && job.logprobs) pending.tokens.push_back({id, s->logprob, std::move(s->top)});
    StopMatcher::Out so = stops.push(dec.push(id));
    feed(so.text);
    if (so.stopped || tool_limit) {
      finish = "stop";
      return false;
    }
    flush_pending(false);
    return true;
  };
  // Fast path: the backend samples (on the GPU for CUDA: no logits copy, no host round trip per token) with the
  // step sampler; a JSON constraint goes along as the allowed-token mask of each step (JsonReplyGate::allowed_mask).
  // The host path keeps the features that need the logits on the host (logprobs, the thinking budget).
  // thinking_budget: reasoning tokens so far, and the last bytes (to see "</think>" across tokens).
  bool thinking = job.thinking_budget > 0 && job.chat && job.parser.thinking_open_at_start;
  int thought = 0;
  std::string think_tail;
  const bool fast = !job.logprobs && budget > 0 && !thinking;
  int consumed = 0;  // decode steps the state has taken (tokens of `generated` consumed)
  std::vector<float> last_logits;
  if (fast) {
    if (cancelled && cancelled()) throw Cancelled();
    StepSampler ss(job.sampling, job.prompt, V);
    int step = 0;            // index of the token the next mask is for
    bool json_done = false;  // the object closed: the turn ends without sampling another token
    TokenMaskFn mask;
    if (json) {
      if (!trie_) trie_ = std::make_unique<VocabTrie>(json_token_text(), V);
      mask = [&](uint32_t* words) {
        json->begin_step(budget - step++);
        return json->allowed_mask(*trie_, words) > 0;
      };
    }
    auto on_token = [&](int32_t id) {
      if (cancelled && cancelled()) throw Cancelled();
      if (json) json->accept(id);
      if (!handle(id, nullptr)) return false;
      json_done = json && json->complete();
      return !json_done;
    };
    int32_t first = -1;
    if (!json) {
      first = ss.sample(logits.data());
    } else {
      std::vector<uint32_t> words(static_cast<size_t>(mask_words(V)));
      if (mask(words.data())) {  // else no token can start the JSON (not with a byte-level vocabulary)
        std::vector<float> masked(static_cast<size_t>(V));
        apply_token_mask(logits.data(), words.data(), V, masked.data());
        first = ss.sample(masked.data());
      }
    }
    if (first >= 0 && on_token(first) && budget > 1) {
      if (cache_) last_logits.resize(static_cast<size_t>(V));
      if (mtp_k_ > 0 && !json) {  // a constrained reply decodes one token per step (its mask needs the last token)
        MtpConfig mc;
        mc.k = mtp_k_;
        MtpStats ms;
        consumed = mtp_decode(be_, *st, ss, first, budget - 1, on_token, cache_ ? last_logits.data() : nullptr, &carry,
                              mc, &ms);
        res.mtp_drafted = ms.drafted;
        res.mtp_accepted = ms.accepted;
        res.mtp_switched_off = ms.switched_off;
      } else {
        consumed = be_.decode_sample(*st, ss, first, budget - 1, on_token, cache_ ? last_logits.data() : nullptr, mask);
      }
    }
    if (json_done) {  // as the host path does when it finds the object closed
      finish = "stop";
      feed_suffix();
      if (end_id >= 0) {
        eos = true;
        generated.push_back(end_id);
      }
    }
  } else {
    Sampler sampler(job.sampling, job.prompt);
    for (int i = 0; i < budget; ++i) {
      if (cancelled && cancelled()) throw Cancelled();
      if (json && json->complete()) {  // the object is closed: end the turn
        finish = "stop";
        feed_suffix();
        if (end_id >= 0) {
          eos = true;
          generated.push_back(end_id);
        }
        break;
      }
      SampleResult s;
      if (json) {
        json->begin_step(budget - i);
        s = sampler.sample(logits.data(), V, [&json](int32_t id) { return json->allows(id); });
        if (s.rejected) break;  // no token continues the JSON (not with a byte-level vocabulary)
        json->accept(s.id);
      } else {
        s = sampler.sample(logits.data(), V);
      }
      const bool go = handle(s.id, &s);
      if (go) sampler.accept(s.id);
      if (!go) break;
      if (i + 1 < budget) {
        be_.forward(*st, &s.id, 1, 1, logits.data(), fo);
        ++consumed;
      }
      if (thinking) {
        think_tail += tok_.token_bytes(s.id);
        if (think_tail.find("</think>") != std::string::npos) thinking = false;
        if (think_tail.size() > 16) think_tail.erase(0, think_tail.size() - 16);
      }
      if (thinking && ++thought >= job.thinking_budget && i + 1 < budget) {  // budget spent: close the block
        thinking = false;
        bool go_on = true;
        for (int32_t ft : tok_.encode("\n</think>\n\n")) {
          ++i;
          if (json) json->accept(ft);
          go_on = handle(ft, nullptr);
          if (!go_on) break;
          sampler.accept(ft);
          if (i + 1 >= budget) break;
          be_.forward(*st, &ft, 1, 1, logits.data(), fo);
          ++consumed;
        }
        if (!go_on || i + 1 >= budget) break;
      }
    }
  }
  res.completion_tokens = static_cast<int>(generated.size()) - (eos ? 1 : 0);
  if (!stops.stopped() && !tool_limit) {
    StopMatcher::Out so = stops.push(dec.flush());
    feed(so.text);
    if (so.stopped) finish = "stop";
    feed(stops.flush());
  }
  if (json && json->complete()) feed_suffix();
  if (json && !stops.stopped()) finish = json->complete() && !json->steered() ? "stop" : "length";
  if (parser) {
    take(parser->finish());
    res.content = parser->content();
    res.reasoning = parser->reasoning();
    res.tool_calls = parser->tool_calls();
    if (job.single_tool_call && res.tool_calls.size() > 1) res.tool_calls.resize(1);
    if (!res.tool_calls.empty() && finish == "stop") finish = "tool_calls";
  }
  flush_pending(true);
  res.finish_reason = finish;
  res.stop_string = stops.matched();
  auto t2 = Clock::now();
  res.decode_s = secs(t1, t2);

  // Reply snapshot candidate. Skipped when a stop string cut the text (the client will not send those
  // tokens back).
  const bool cut = stops.stopped() || tool_limit;
  // The state has consumed the prompt and `consumed` generated tokens: all but the last (it is forwarded when the
  // snapshot is saved) or, after a stop seen by decode_sample's lookahead, all of them (logits kept).
  const int ng = static_cast<int>(generated.size());
  if (cache_ && !cut && ng > 0 && st->pos == n + consumed) {
    if (consumed == ng - 1 && st->pos + 1 <= ctx_) {
      reply_state_ = std::move(st);
      reply_logits_.clear();
    } else if (consumed == ng && static_cast<int>(last_logits.size()) == V) {
      reply_state_ = std::move(st);
      reply_logits_ = std::move(last_logits);
    }
    if (reply_state_) {
      reply_tokens_ = job.prompt;
      reply_tokens_.insert(reply_tokens_.end(), generated.begin(), generated.end());
      reply_key_ = job.cache_key;
    }
  }
  return res;
}

}  // namespace lily
