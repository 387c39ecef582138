// Generator on the demo model: session-cache resumption gives the same output as a fresh run, snapshots
// at prompt boundaries and after replies, cancellation mid-prefill, stop strings, seeded sampling,
// json_object replies.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "app/make_backend.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "model/weights.h"
#include "engine/session_cache.h"
#include "tokenizer/tokenizer.h"

using namespace lily;

namespace {

struct Demo {
  std::shared_ptr<ModelWeights> w;
  std::shared_ptr<Tokenizer> tok;
  std::unique_ptr<Backend> be;
  Demo() {
    const std::string dir = std::string(LILY_TEST_DIR) + "/../demo/tiny-model";
    w = load_model(dir);
    tok = Tokenizer::load(dir + "/tokenizer.json");
    be = make_backend("cpu-ref", w);
  }
};

Demo& demo() {
  static Demo d;
  return d;
}

GenJob job_for(const std::string& text, int max_tokens = 8) {
  GenJob j;
  j.prompt = demo().tok->encode(text);
  j.max_tokens = max_tokens;
  j.sampling.temperature = 0;
  return j;
}

struct Outcome {
  GenResult r;
  std::string streamed;
  int chunks = 0;
};

Outcome run(Generator& g, const GenJob& j, std::function<bool()> cancelled = nullptr) {
  Outcome out;
  out.r = g.run(j, [&](GenChunk&& c) {
    out.streamed += c.delta.content;
    out.chunks++;
  }, cancelled);
  return out;
}

const std::string kPrompt = "The history of the printing press begins in the fifteenth century, when";

}  // namespace

TEST(Generate, FreshRunStreamsWhatItReturns) {
  Generator g(*demo().be, *demo().tok, nullptr, 256);
  Outcome a = run(g, job_for(kPrompt, 12));
  EXPECT_EQ(a.r.prompt_tokens, static_cast<int>(demo().tok->encode(kPrompt).size()));
  EXPECT_EQ(a.r.cached_tokens, 0);
  EXPECT_EQ(a.streamed, a.r.content);
  EXPECT_GT(a.chunks, 0);
  if (a.r.finish_reason == "length") {
    EXPECT_EQ(a.r.completion_tokens, 12);
  }
}

TEST(Generate, CacheResumesWithIdenticalOutput) {
  SessionCache cache(64 << 20);
  Generator plain(*demo().be, *demo().tok, nullptr, 256);
  Generator cached(*demo().be, *demo().tok, &cache, 256);
  GenJob j = job_for(kPrompt, 10);
  Outcome ref = run(plain, j);
  Outcome first = run(cached, j);
  EXPECT_EQ(first.r.cached_tokens, 0);
  EXPECT_EQ(first.r.content, ref.r.content);
  Outcome again = run(cached, j);
  EXPECT_EQ(again.r.cached_tokens, again.r.prompt_tokens);  // whole prompt from the snapshot (with its logits)
  EXPECT_EQ(again.r.content, ref.r.content);
}

TEST(Generate, SnapshotBoundaryInsidePrompt) {
  // Two prompts share a head; the first run snapshots where the head ends.
  const std::string head = "A shared beginning of two prompts, long enough to matter.";
  GenJob a = job_for(head + " First ending.", 6), b = job_for(head + " Another, different ending!", 6);
  size_t k = 0;
  while (k < a.prompt.size() && k < b.prompt.size() && a.prompt[k] == b.prompt[k]) ++k;
  ASSERT_GT(k, 4u);
  a.snapshot_at = {static_cast<int>(k)};
  b.snapshot_at = {static_cast<int>(k)};

  SessionCache ref_cache(64 << 20), cache(64 << 20);
  Generator ref_gen(*demo().be, *demo().tok, &ref_cache, 256);
  Outcome ref = run(ref_gen, b);  // same prefill split, from scratch
  EXPECT_EQ(ref.r.cached_tokens, 0);

  Generator g(*demo().be, *demo().tok, &cache, 256);
  run(g, a);
  Outcome resumed = run(g, b);
  EXPECT_EQ(resumed.r.cached_tokens, static_cast<int>(k));
  EXPECT_EQ(resumed.r.content, ref.r.content);
}

TEST(Generate, ReplySnapshotCoversPromptAndReply) {
  SessionCache cache(64 << 20);
  Generator g(*demo().be, *demo().tok, &cache, 256);
  GenJob j = job_for(kPrompt, 5);
  Outcome first = run(g, j);
  g.save_reply_snapshot();
  // the next prompt: prompt + generated tokens (+ end-of-turn when it stopped) + more
  GenJob next = j;
  std::vector<int32_t> reply = demo().tok->encode(first.r.content);
  next.prompt.insert(next.prompt.end(), reply.begin(), reply.end());
  const int covered = static_cast<int>(next.prompt.size());
  for (int32_t t : demo().tok->encode(" and then more text")) next.prompt.push_back(t);
  Outcome second = run(g, next);
  if (first.r.finish_reason == "length" && demo().tok->decode(reply) == first.r.content &&
      static_cast<int>(reply.size()) == first.r.completion_tokens) {
    EXPECT_EQ(second.r.cached_tokens, covered);
  } else {  // the reply does not re-encode to the same tokens: the prompt snapshot still applies
    EXPECT_GE(second.r.cached_tokens, static_cast<int>(j.prompt.size()));
  }
}

TEST(Generate, CancelMidPrefill) {
  SessionCache cache(64 << 20);
  Generator g(*demo().be, *demo().tok, &cache, 1024, /*prefill_chunk=*/8);
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Cancel me while I am still being read. ";
  GenJob j = job_for(text, 4);
  ASSERT_GT(j.prompt.size(), 64u);
  int checks = 0;
  EXPECT_THROW(run(g, j, [&] { return ++checks > 2; }), Cancelled);
  EXPECT_EQ(checks, 3);  // stopped at the third chunk boundary, not after the whole prompt
  EXPECT_EQ(cache.size(), 0u);  // nothing half-done was stored
  // the generator is usable afterwards
  Outcome ok = run(g, job_for("short", 2));
  EXPECT_EQ(ok.r.completion_tokens > 0, true);
}

TEST(Generate, StopStringsCutTheOutput) {
  Generator g(*demo().be, *demo().tok, nullptr, 256);
  GenJob j = job_for(kPrompt, 24);
  Outcome full = run(g, j);
  ASSERT_GE(full.r.content.size(), 8u);
  const std::string stop = full.r.content.substr(4, 2);
  j.stop = {stop};
  Outcome cut = run(g, j);
  EXPECT_EQ(cut.r.content, full.r.content.substr(0, full.r.content.find(stop)));
  EXPECT_EQ(cut.streamed, cut.r.content);
  EXPECT_EQ(cut.r.finish_reason, "stop");
}

TEST(Generate, SeededSamplingRepeats) {
  Generator g(*demo().be, *demo().tok, nullptr, 256);
  GenJob j = job_for(kPrompt, 16);
  j.sampling.temperature = 1.0f;
  j.sampling.has_seed = true;
  j.sampling.seed = 2024;
  EXPECT_EQ(run(g, j).r.content, run(g, j).r.content);
}

TEST(Generate, ChatParsesReasoning) {
  Generator g(*demo().be, *demo().tok, nullptr, 256);
  GenJob j = job_for("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n", 6);
  j.chat = true;
  j.parser.thinking_open_at_start = true;
  Outcome r = run(g, j);
  // no </think> in 6 noise tokens: everything is reasoning
  EXPECT_FALSE(r.r.reasoning.empty());
}

TEST(Generate, JsonObjectReplyParses) {
  Generator g(*demo().be, *demo().tok, nullptr, 256);
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    GenJob j = job_for("<|im_start|>user\nJSON please<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", 24);
    j.chat = true;
    j.json_object = true;
    j.sampling.temperature = 1.0f;
    j.sampling.has_seed = true;
    j.sampling.seed = seed;
    Outcome o = run(g, j);
    EXPECT_EQ(o.streamed, o.r.content);
    EXPECT_LE(o.r.completion_tokens, 24);
    // max_tokens >= 2: closed in time, by the model ("stop") or the budget rule ("length").
    ASSERT_TRUE(nlohmann::json::accept(o.r.content)) << o.r.content;
    EXPECT_TRUE(nlohmann::json::parse(o.r.content).is_object()) << o.r.content;
    EXPECT_TRUE(o.r.finish_reason == "stop" || o.r.finish_reason == "length");
  }
  // Thinking open: the reasoning is free text and the JSON would start after </think>, which the
  // random model does not write in a few tokens.
  GenJob j = job_for("<|im_start|>user\nJSON please<|im_end|>\n<|im_start|>assistant\n<think>\n", 8);
  j.chat = true;
  j.json_object = true;
  j.parser.thinking_open_at_start = true;
  Outcome o = run(g, j);
  EXPECT_EQ(o.r.finish_reason, "length");
  EXPECT_FALSE(o.r.reasoning.empty());
  EXPECT_EQ(o.r.content, "");
}
