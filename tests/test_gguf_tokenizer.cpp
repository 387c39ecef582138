// The tokenizer from GGUF metadata: the tiny fixture's tokenizer.json written as llama.cpp's converter writes
// tokenizer.ggml.* (tokens by id, token types, "a b" merges, pre "qwen35"), read back: the same ids and
// decoded text as the Hugging Face tokenizer on every fixture case; the chat template comes back verbatim.
#include <gtest/gtest.h>

#include "cli/model_assets.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "loader_test_util.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

using namespace lily;
using namespace lily::test;

namespace {

std::shared_ptr<GgufModel> write_and_open(const GgufWriter& w, const lily_test::TempDir& d, const std::string& name) {
  w.write(d / name);
  return std::make_shared<GgufModel>(d / name);
}

}  // namespace

TEST(GgufTokenizer, SameIdsAsTokenizerJsonOnFixtureCases) {
  const std::string json_text = read_file(tiny_tokenizer_path());
  GgufWriter w;
  w.add_string("general.architecture", "qwen35moe");
  gguf_add_tokenizer(json_text, w);
  const std::string tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
  w.add_string("tokenizer.chat_template", tmpl);
  lily_test::TempDir d;
  auto m = write_and_open(w, d, "tok.gguf");
  auto from_gguf = gguf_tokenizer(*m);
  auto from_json = Tokenizer::from_json_text(json_text, "tokenizer.json");
  EXPECT_EQ(std::string(from_gguf->split_engine()), std::string(from_json->split_engine()));
  EXPECT_EQ(from_gguf->vocab_size(), from_json->vocab_size());
  const auto cases = read_cases(LILY_TEST_DIR "/fixtures/tiny/tokenizer_cases.jsonl");
  ASSERT_GT(cases.size(), 10u);
  for (const TokCase& c : cases) {
    const auto ids = from_gguf->encode(c.text);
    EXPECT_EQ(ids, c.ids) << c.text;
    EXPECT_EQ(from_gguf->decode(ids), from_json->decode(ids)) << c.text;
  }
  for (int32_t id = 0; id < int32_t(from_json->vocab_size()); ++id) {
    EXPECT_EQ(from_gguf->is_special(id), from_json->is_special(id)) << id;
    EXPECT_EQ(from_gguf->token_bytes(id), from_json->token_bytes(id)) << id;
  }
  EXPECT_EQ(gguf_chat_template(*m), tmpl);
}

TEST(GgufTokenizer, ErrorsNameFileAndKey) {
  lily_test::TempDir d;
  GgufWriter none;
  none.add_string("tokenizer.ggml.model", "gpt2");
  auto m = write_and_open(none, d, "none.gguf");
  std::string e = lily_test::error_of([&] { gguf_tokenizer(*m); });
  EXPECT_NE(e.find("none.gguf: metadata key 'tokenizer.ggml.tokens' is missing"), std::string::npos) << e;
  EXPECT_EQ(gguf_chat_template(*m), "");
  GgufWriter spm;
  spm.add_string("tokenizer.ggml.model", "llama");
  m = write_and_open(spm, d, "spm.gguf");
  e = lily_test::error_of([&] { gguf_tokenizer(*m); });
  EXPECT_NE(e.find("only byte-level BPE"), std::string::npos) << e;
  GgufWriter bad;
  gguf_add_tokenizer(read_file(tiny_tokenizer_path()), bad, "falcon");
  m = write_and_open(bad, d, "bad.gguf");
  e = lily_test::error_of([&] { gguf_tokenizer(*m); });
  EXPECT_NE(e.find("tokenizer.ggml.pre 'falcon' is not supported"), std::string::npos) << e;
}

// What `lily serve/run/chat --model FILE.gguf` use: tokenizer and template from the file alone.
TEST(GgufTokenizer, ModelAssetsFromTheFileAlone) {
  lily_test::TempDir d;
  GgufWriter w;
  w.add_string("general.architecture", "qwen35moe");
  gguf_add_tokenizer(read_file(tiny_tokenizer_path()), w);
  w.add_string("tokenizer.chat_template",
               "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  w.write(d / "m.gguf");
  auto tok = load_model_tokenizer(d / "m.gguf");
  const ChatTemplate t = load_model_template(d / "m.gguf");
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"add_generation_prompt", true}};
  const std::string prompt = t.render(ctx);
  EXPECT_EQ(prompt, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = tok->encode(prompt);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), tok->token_to_id("<|im_start|>"));
  EXPECT_TRUE(tok->is_special(ids.front()));
  GgufWriter none;
  gguf_add_tokenizer(read_file(tiny_tokenizer_path()), none);
  none.write(d / "none.gguf");
  const std::string e = lily_test::error_of([&] { load_model_template(d / "none.gguf"); });
  EXPECT_NE(e.find("no chat template"), std::string::npos) << e;
}
