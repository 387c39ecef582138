// libFuzzer target (scripts/fuzz.sh): bytes as a request body through everything a body reaches before
// the model does: the JSON gate, chat / completion validation, special-token masking, the chat template's
// value conversion and rendering with the demo model's template. Any crash, sanitizer report or
// exception other than the intended ApiError / lily::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/value.h"
#include "chat/template.h"
#include "core/error.h"
#include "server/json_limits.h"
#include "server/literal_text.h"
#include "server/request_parse.h"

namespace {

const lily::ChatTemplate& demo_template() {
  static const lily::ChatTemplate t = lily::ChatTemplate::load_for_model(LILY_SOURCE_DIR "/demo/tiny-model");
  return t;
}

void chat(const nlohmann::json& body) {
  lily::ChatRequest r = lily::parse_chat_request(body);
  nlohmann::ordered_json ctx = r.template_kwargs;
  ctx["messages"] = r.messages;
  if (!r.tools.is_null()) ctx["tools"] = r.tools;
  ctx["add_generation_prompt"] = true;
  std::vector<std::string> literals;
  lily::mask_special_text(ctx, {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}, literals);
  for (auto it = ctx.begin(); it != ctx.end(); ++it) (void)lily::jinja::Value::from_json(it.value());
  std::string text = demo_template().render(ctx);
  std::vector<size_t> at;
  text = lily::unmask_special_text(text, literals, at);
  for (size_t i = 1; i < at.size(); ++i)
    if (at[i] <= at[i - 1]) __builtin_trap();  // offsets must be increasing
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json body;
  try {
    body = lily::parse_client_json(text, "the request body");
  } catch (const lily::ApiError&) {
    return 0;
  }
  if (lily::json_nesting_depth(text) > lily::kMaxJsonDepth) __builtin_trap();  // the gate let it through
  try {
    chat(body);
  } catch (const lily::ApiError&) {
  } catch (const lily::Error&) {
  }
  try {
    (void)lily::parse_completion_request(body);
  } catch (const lily::ApiError&) {
  }
  return 0;
}
