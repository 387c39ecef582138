// The allowed-token mask of constrained decoding: VocabTrie (engine/vocab_trie.h) and JsonReplyGate::allowed_mask
// against the gate's own allows() for every token, at every step of constrained generations (json_object and schemas,
// with and without a reasoning block, budgets that make the budget rule refuse tokens), on a toy vocabulary with
// shared prefixes, duplicate texts and special tokens and on the demo model's tokenizer; apply_token_mask; and
// Backend::decode_sample's mask on a fake backend.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/json_reply.h"
#include "engine/json_schema.h"
#include "engine/step_sampler.h"
#include "engine/vocab_trie.h"
#include "tokenizer/tokenizer.h"

using namespace lily;

namespace {

// ids 0..255: single bytes; then texts with shared prefixes, a duplicate, the think close, end of turn, specials.
const std::vector<std::string>& toy_texts() {
  static const std::vector<std::string> t = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
    for (const char* s : {"{\"", "{\"a", "{\"a\":", "\"}", "\":", "\",\"", "true", "tr", "null", "12", "123", "1.5e",
                          "[[[[", "]]", "}}", "</think>", "</think>\n\n{", "k>{", "hello", "hello", "\\u00e9", "\xc3\xa9",
                          "\xe2\x82", " {", "  ", "<|im_end|>", "", ""})
      v.push_back(s);
    return v;
  }();
  return t;
}
constexpr int32_t kToyEnd = 256 + 25;

// Walks `steps` tokens of a constrained generation: at each step the mask must equal allows() of every token, on a copy
// of the gate (allows() may set steered()); the next token is drawn among the allowed ones, preferring those that
// move towards closing the JSON now and then so that generations end.
void check_walk(const JsonReplyGate::TokenText& text, int vocab, const std::vector<int32_t>& end_ids, bool thinking,
                std::shared_ptr<const JsonSchema> schema, int budget, uint32_t seed) {
  VocabTrie trie(text, vocab);
  JsonReplyGate gate(text, end_ids, thinking, schema);
  std::mt19937 rng(seed);
  std::vector<uint32_t> words(size_t(mask_words(vocab)));
  for (int i = 0; i < budget && !gate.complete(); ++i) {
    gate.begin_step(budget - i);
    JsonReplyGate ref = gate;
    const int n = gate.allowed_mask(trie, words.data());
    std::vector<int32_t> allowed;
    bool any_budget_refusal = false;
    for (int32_t id = 0; id < vocab; ++id) {
      JsonReplyGate probe = ref;
      const bool a = probe.allows(id);
      if (!ref.steered() && probe.steered()) any_budget_refusal = true;
      ASSERT_EQ(mask_bit(words.data(), id), a) << "step " << i << " token " << id << " '" << text(id) << "'";
      if (a) allowed.push_back(id);
    }
    ASSERT_EQ(n, int(allowed.size()));
    EXPECT_EQ(gate.steered(), ref.steered() || any_budget_refusal) << "step " << i;
    if (allowed.empty()) break;
    // Prefer a token that lowers the bytes still needed to close the JSON every third step.
    int32_t pick = allowed[rng() % allowed.size()];
    if (i % 3 == 2 && gate.in_json()) {
      int best = 1 << 30;
      for (int32_t id : allowed) {
        JsonReplyGate::Body b = gate.body();
        b.advance(text(id));
        if (b.min_close_bytes() < best) {
          best = b.min_close_bytes();
          pick = id;
        }
      }
    }
    gate.accept(pick);
  }
}

std::string toy_text(int32_t id) { return toy_texts()[size_t(id)]; }

}  // namespace

TEST(VocabTrie, EveryTokenOnceUnderItsText) {
  const int V = int(toy_texts().size());
  VocabTrie trie(toy_text, V);
  std::vector<int> seen(size_t(V), 0);
  std::vector<std::string> path(trie.max_depth() + 1);
  const auto& nodes = trie.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    ASSERT_GE(n.depth, 1u);
    path[n.depth] = path[n.depth - 1] + char(n.byte);
    ASSERT_GT(n.end, i);
    ASSERT_LE(n.end, nodes.size());
    ASSERT_LE(n.tok_begin, n.tok_end);
    ASSERT_LE(n.tok_end, n.sub_end);
    for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) {
      const int32_t id = trie.ids()[t];
      EXPECT_EQ(toy_text(id), path[n.depth]) << id;
      ++seen[size_t(id)];
    }
    for (size_t j = i + 1; j < n.end; ++j) EXPECT_GT(nodes[j].depth, n.depth);  // the subtree is contiguous
  }
  for (int32_t id = 0; id < V; ++id) EXPECT_EQ(seen[size_t(id)], toy_text(id).empty() ? 0 : 1) << id;
}

TEST(TokenMask, ToyVocabularyMatchesAllows) {
  const int V = int(toy_texts().size());
  const auto schema = JsonSchema::compile(nlohmann::json::parse(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"enum":["x","hello"]},)"
      R"("c":{"type":"array","items":{"type":"boolean"},"maxItems":3}},"required":["a"],"additionalProperties":false})"));
  for (uint32_t seed = 1; seed <= 6; ++seed)
    for (bool thinking : {false, true})
      for (int budget : {6, 12, 40}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + (thinking ? " thinking" : "") + " budget " +
                     std::to_string(budget));
        check_walk(toy_text, V, {kToyEnd}, thinking, nullptr, budget, seed);
        check_walk(toy_text, V, {kToyEnd}, thinking, schema, budget, seed);
      }
}

TEST(TokenMask, DemoTokenizerMatchesAllows) {
  auto tok = Tokenizer::load(std::string(LILY_TEST_DIR) + "/../demo/tiny-model/tokenizer.json");
  const Tokenizer& t = *tok;
  JsonReplyGate::TokenText text = [&t](int32_t id) { return t.is_special(id) ? std::string() : t.token_bytes(id); };
  const int V = int(t.vocab_size());
  const int32_t end = t.token_to_id("<|im_end|>");
  ASSERT_GE(end, 0);
  const auto schema = JsonSchema::compile(nlohmann::json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"number"},)"
      R"("tags":{"type":"array","items":{"type":"string"}}},"required":["name","n"]})"));
  for (uint32_t seed = 1; seed <= 2; ++seed)
    for (bool thinking : {false, true}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + (thinking ? " thinking" : ""));
      check_walk(text, V, {end}, thinking, nullptr, 24, seed);
      check_walk(text, V, {end}, thinking, schema, 24, seed);
    }
}

TEST(TokenMask, ApplyTokenMask) {
  const int V = 70;
  std::vector<float> logits(V), out(V);
  for (int i = 0; i < V; ++i) logits[size_t(i)] = float(i) - 30.0f;
  std::vector<uint32_t> w(size_t(mask_words(V)), 0u);
  ASSERT_EQ(w.size(), 3u);
  for (int i : {0, 31, 32, 65, 69}) w[size_t(i >> 5)] |= 1u << (i & 31);
  apply_token_mask(logits.data(), w.data(), V, out.data());
  for (int i = 0; i < V; ++i) {
    const bool on = i == 0 || i == 31 || i == 32 || i == 65 || i == 69;
    if (on) EXPECT_EQ(out[size_t(i)], logits[size_t(i)]) << i;
    else EXPECT_TRUE(std::isinf(out[size_t(i)]) && out[size_t(i)] < 0) << i;
  }
}
