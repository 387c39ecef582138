// llama.cpp's qwen35 tokenizer test vectors (tests/fixtures/qwen35-chat/ggml-vocab-qwen35.gguf.inp/.out). Their
// ids are not real Qwen3.5 ids: they come from the Qwen2/Qwen3 151k vocabulary split with the Qwen3.5 regex and,
// as llama.cpp does, WITHOUT NFC (see the fixture README). So they run against the Qwen3 tokenizer.json with the
// Qwen3.5 regex: all cases with the normalizer removed, and with NFC (HF behaviour) all cases whose text NFC
// leaves unchanged.
#include <gtest/gtest.h>

#include <unicode/normalizer2.h>

#include "tokenizer/split_regex.h"
#include "tokenizer_test_util.h"

using namespace lily;
using namespace lily::test;

namespace {

struct GgmlCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<GgmlCase> read_ggml_cases() {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string inp = read_file(LILY_TEST_DIR "/fixtures/qwen35-chat/ggml-vocab-qwen35.gguf.inp");
  std::string out = read_file(LILY_TEST_DIR "/fixtures/qwen35-chat/ggml-vocab-qwen35.gguf.out");
  std::vector<std::string> texts;
  size_t p = 0;
  for (size_t q; (q = inp.find(sep, p)) != std::string::npos; p = q + sep.size()) texts.push_back(inp.substr(p, q - p));
  std::vector<GgmlCase> cases;
  std::istringstream lines(out);
  std::string line;
  for (size_t i = 0; i < texts.size() && std::getline(lines, line); ++i) {
    GgmlCase c{texts[i], {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

bool is_nfc(const std::string& s) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(st);
  return n->isNormalizedUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), st) && U_SUCCESS(st);
}

}  // namespace

TEST(TokGgmlVectors, Qwen3VocabQwen35RegexNoNormalizer) {
  if (!file_exists(qwen3_tokenizer_path())) GTEST_SKIP() << "no " << qwen3_tokenizer_path() << " (run scripts/fetch-test-data.sh)";
  auto cases = read_ggml_cases();
  ASSERT_EQ(cases.size(), 50u);
  auto j = nlohmann::json::parse(with_split_regex(read_file(qwen3_tokenizer_path()), kQwen35SplitPattern));
  auto tok_nfc = Tokenizer::from_json_text(j.dump(), "qwen3+qwen35 regex");
  j["normalizer"] = nullptr;
  auto tok_raw = Tokenizer::from_json_text(j.dump(), "qwen3+qwen35 regex, no normalizer");
  int nfd_cases = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(tok_raw->encode(cases[i].text), cases[i].ids) << "case " << i << ": " << nlohmann::json(cases[i].text).dump();
    if (is_nfc(cases[i].text)) {
      EXPECT_EQ(tok_nfc->encode(cases[i].text), cases[i].ids) << "case " << i;
    } else {
      ++nfd_cases;
      EXPECT_NE(tok_nfc->encode(cases[i].text), cases[i].ids) << "case " << i << ": NFC should change the ids";
    }
  }
  EXPECT_EQ(nfd_cases, 3);
}
