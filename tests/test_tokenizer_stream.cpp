// Decoding: lossy UTF-8 as Rust's from_utf8_lossy (what HF decode() returns), the incremental StreamDecoder,
// and encode speed on a long prompt.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

using namespace lily;
using namespace lily::test;

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::shared_ptr<Tokenizer> best_tokenizer() {
  return Tokenizer::load(file_exists(qwen3_tokenizer_path()) ? qwen3_tokenizer_path() : tiny_tokenizer_path());
}

// Streams ids one at a time; checks every chunk is well-formed UTF-8 and returns the concatenation.
std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder sd(tok);
  std::string all;
  for (int32_t id : ids) {
    std::string chunk = sd.push(id);
    EXPECT_EQ(utf8::first_invalid(chunk), std::string::npos) << "chunk after id " << id << " is not valid UTF-8";
    all += chunk;
  }
  std::string rest = sd.flush();
  EXPECT_EQ(utf8::first_invalid(rest), std::string::npos);
  return all + rest;
}

}  // namespace

TEST(TokUtf8, LossyReplacesMaximalIllFormedSubparts) {
  EXPECT_EQ(utf8::lossy("abc"), "abc");
  EXPECT_EQ(utf8::lossy("\xF0\x9F\x98" "A"), kFffd + "A");        // truncated 4-byte sequence: one U+FFFD
  EXPECT_EQ(utf8::lossy("\xC0\x80"), kFffd + kFffd);              // C0 never starts a sequence
  EXPECT_EQ(utf8::lossy("\xE0\x80\x80"), kFffd + kFffd + kFffd);  // overlong
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(utf8::lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
  EXPECT_EQ(utf8::lossy("x\xE2\x82"), "x" + kFffd);               // unfinished at the end
  EXPECT_EQ(utf8::lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");         // €
  EXPECT_EQ(utf8::lossy("\xFF" "a\x80"), kFffd + "a" + kFffd);
}

TEST(TokStream, TinyByteTokensOfEmojiAndCjk) {
  auto tok = Tokenizer::load(tiny_tokenizer_path());
  std::string text = "Emoji: 😀🚀👍🏽 and 中文字符，日本語のテキスト🇹🇷 done";
  auto ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(stream_all(*tok, ids), text);
  // 😀 is four single-byte tokens in the tiny vocab: nothing is emitted until the last one.
  auto emoji = tok->encode("😀");
  ASSERT_EQ(emoji.size(), 4u);
  StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(emoji[0]), "");
  EXPECT_EQ(sd.push(emoji[1]), "");
  EXPECT_EQ(sd.push(emoji[2]), "");
  EXPECT_EQ(sd.push(emoji[3]), "😀");
  EXPECT_EQ(sd.flush(), "");
}

TEST(TokStream, IncompleteTailBecomesReplacementAtFlush) {
  auto tok = Tokenizer::load(tiny_tokenizer_path());
  auto ids = tok->encode("😀");
  ids.pop_back();
  StreamDecoder sd(*tok);
  std::string out;
  for (int32_t id : ids) out += sd.push(id);
  EXPECT_EQ(out, "");
  EXPECT_EQ(sd.flush(), kFffd);
  EXPECT_EQ(tok->decode(ids), kFffd);
  // An added token after a broken sequence: the broken bytes give one U+FFFD, then the token text.
  ids.push_back(tok->token_to_id("<think>"));
  EXPECT_EQ(stream_all(*tok, ids), kFffd + "<think>");
  EXPECT_EQ(tok->decode(ids), kFffd + "<think>");
}

TEST(TokStream, RandomIdsStreamEqualsDecode) {
  auto tok = best_tokenizer();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id_d(-3, static_cast<int32_t>(tok->vocab_size()) + 3);  // some unknown ids
  for (int round = 0; round < 200; ++round) {
    std::vector<int32_t> ids(1 + round % 40);
    for (auto& id : ids) id = id_d(rng);
    std::string d = tok->decode(ids);
    EXPECT_EQ(utf8::first_invalid(d), std::string::npos);
    EXPECT_EQ(stream_all(*tok, ids), d);
  }
}

TEST(TokStream, MultilingualTextRoundTrips) {
  auto tok = best_tokenizer();
  std::string text =
      "人工智能正在改变世界。 Ünïcödé façade — naïve café! 😀👨‍👩‍👧 🇯🇵 한국어 텍스트 العربية हिन्दी ไทย "
      "<|im_start|>user\nHi<|im_end|>\n<think>\n\n</think>\n\n";
  auto ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(stream_all(*tok, ids), text);
}

TEST(TokSpeed, Encode12KB) {
  auto tok = best_tokenizer();  // fresh: the word cache is cold
  std::string text;
  const char* prose =
      "The quick brown fox jumps over the lazy dog while the committee reviews section %d of the report. "
      "Latency, throughput and memory use were measured %d times; the median is what we quote here.\n";
  const char* code =
      "for (int i = 0; i < n_%d; ++i) {\n    out[i] = std::max(acc[i] * scale_%d, 0.0f);  // ReLU\n}\n";
  char buf[512];
  for (int i = 0; text.size() < 12 * 1024; ++i) {
    std::snprintf(buf, sizeof buf, (i % 3 == 2) ? code : prose, i, i * 7 + 3);
    text += buf;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto ids = tok->encode(text);
  auto t1 = std::chrono::steady_clock::now();
  auto ids2 = tok->encode(text);
  auto t2 = std::chrono::steady_clock::now();
  double cold = std::chrono::duration<double, std::milli>(t1 - t0).count();
  double warm = std::chrono::duration<double, std::milli>(t2 - t1).count();
  std::printf("[ timing   ] encode %zu bytes -> %zu tokens: %.2f ms cold cache, %.2f ms warm\n", text.size(),
              ids.size(), cold, warm);
  EXPECT_EQ(ids, ids2);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_LT(cold, 2000.0);

  // Varied multilingual text (the fixture texts, each seen once): little help from the word cache.
  std::string mixed;
  for (const auto& c : read_cases(LILY_TEST_DIR "/fixtures/qwen3-tokenizer/cases.jsonl")) mixed += c.text;
  auto fresh = best_tokenizer();
  t0 = std::chrono::steady_clock::now();
  auto mixed_ids = fresh->encode(mixed);
  t1 = std::chrono::steady_clock::now();
  double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  std::printf("[ timing   ] encode %zu bytes of mixed fixture text -> %zu tokens: %.2f ms cold cache\n", mixed.size(),
              mixed_ids.size(), ms);
  EXPECT_LT(ms, 5000.0);
}
