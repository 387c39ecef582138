// Malformed tokenizer.json and bad input: every problem is a lily::Error whose message names it.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer_test_util.h"

using namespace lily;
using namespace lily::test;

namespace {

// Expects from_json_text(json) to throw a lily::Error containing `needle`.
void expect_load_error(const std::string& json, const std::string& needle) {
  try {
    Tokenizer::from_json_text(json, "test.json");
    ADD_FAILURE() << "no error for: " << json.substr(0, 200);
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << "message: " << m;
    EXPECT_NE(m.find("test.json"), std::string::npos) << "message does not name the source: " << m;
  }
}

nlohmann::json tiny_json() { return nlohmann::json::parse(read_file(tiny_tokenizer_path())); }

}  // namespace

TEST(TokErrors, MissingFileNamesIt) {
  try {
    Tokenizer::load("/nonexistent/dir/tokenizer.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json"), std::string::npos);
  }
}

TEST(TokErrors, TruncatedJson) {
  std::string text = read_file(tiny_tokenizer_path());
  expect_load_error(text.substr(0, text.size() / 2), "invalid JSON");
  expect_load_error("", "invalid JSON");
  expect_load_error("[1, 2]", "not a JSON object");
}

TEST(TokErrors, MissingOrBadModel) {
  auto j = tiny_json();
  j.erase("model");
  expect_load_error(j.dump(), "missing \"model\"");
  j = tiny_json();
  j["model"]["type"] = "WordPiece";
  expect_load_error(j.dump(), "unsupported model type \"WordPiece\"");
  j = tiny_json();
  j["model"].erase("vocab");
  expect_load_error(j.dump(), "model.vocab");
  j = tiny_json();
  j["model"]["vocab"]["Ġthe"] = "seven";
  expect_load_error(j.dump(), "non-integer id");
  j = tiny_json();
  j["model"]["vocab"]["Ġthe"] = -5;
  expect_load_error(j.dump(), "out of range");
}

TEST(TokErrors, BadMerges) {
  auto j = tiny_json();
  j["model"]["merges"][3] = "nospace";
  expect_load_error(j.dump(), "model.merges[3]");
  j = tiny_json();
  j["model"]["merges"][5] = nlohmann::json::array({"Ġ", "zzzz_not_in_vocab"});
  expect_load_error(j.dump(), "zzzz_not_in_vocab");
  j = tiny_json();
  j["model"]["merges"][0] = 42;
  expect_load_error(j.dump(), "model.merges[0] must be");
  j = tiny_json();
  j["model"]["merges"] = "Ġ Ġ";
  expect_load_error(j.dump(), "model.merges");
}

TEST(TokErrors, MergesInStringFormAreAccepted) {
  auto j = tiny_json();
  for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  auto a = Tokenizer::from_json_text(j.dump(), "string merges");
  auto b = Tokenizer::load(tiny_tokenizer_path());
  std::string text = "Hello, world! How are you doing today? 12345 ünïcödé";
  EXPECT_EQ(a->encode(text), b->encode(text));
}

TEST(TokErrors, BadAddedTokensAndPipeline) {
  auto j = tiny_json();
  j["added_tokens"][0].erase("content");
  expect_load_error(j.dump(), "added_tokens[0]");
  j = tiny_json();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_load_error(j.dump(), "unsupported normalizer type \"Lowercase\"");
  j = tiny_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_load_error(j.dump(), "unsupported pre_tokenizer type \"Whitespace\"");
  j = tiny_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "([a-z";
  expect_load_error(j.dump(), "regex cannot be compiled");
  j = tiny_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_load_error(j.dump(), "behavior \"Removed\"");
  j = tiny_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_load_error(j.dump(), "unsupported decoder type");
}

TEST(TokErrors, InvalidUtf8Input) {
  auto tok = Tokenizer::load(tiny_tokenizer_path());
  try {
    tok->encode("abc\xC3(def");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 3"), std::string::npos) << e.what();
  }
}

TEST(TokErrors, OtherPipelineVariantsLoad) {
  // A bare ByteLevel pre-tokenizer (GPT-2 regex, ICU engine), no normalizer, normalizer Sequence[NFC].
  auto j = tiny_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array({{{"type", "NFC"}}})}};
  auto tok = Tokenizer::from_json_text(j.dump(), "gpt2-style");
  EXPECT_STREQ(tok->split_engine(), "icu");
  std::string text = "Hello world's  end\n";
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  j["normalizer"] = nullptr;
  EXPECT_NO_THROW(Tokenizer::from_json_text(j.dump(), "no normalizer"));
}
