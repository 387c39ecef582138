#include "server/response_json.h"

#include <chrono>
#include <random>

namespace lily {

std::string new_response_id(const char* prefix) {
  static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 g{std::random_device{}()};
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += chars[g() % (sizeof(chars) - 1)];
  return s;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ojson error_json(const ApiError& e) {
  ojson err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return {{"error", err}};
}

ojson usage_json(const GenResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

namespace {

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

ojson tool_calls_json(const std::vector<ToolCallOut>& calls) {
  ojson a = ojson::array();
  for (const auto& c : calls)
    a.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments_json}}}});
  return a;
}

}  // namespace

ojson chat_logprobs_json(const std::vector<TokenInfo>& toks, const Tokenizer& tok) {
  ojson content = ojson::array();
  for (const auto& t : toks) {
    ojson top = ojson::array();
    for (const auto& a : t.top)
      top.push_back({{"token", tok.decode({a.id})}, {"logprob", a.logprob}, {"bytes", bytes_of(tok.token_bytes(a.id))}});
    content.push_back({{"token", tok.decode({t.id})},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(tok.token_bytes(t.id))},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

ojson chat_completion_json(const ResponseMeta& m, const GenResult& r, const std::vector<TokenInfo>* logprobs,
                           const Tokenizer& tok) {
  ojson msg = {{"role", "assistant"}, {"content", nullptr}};
  if (!r.content.empty() || r.tool_calls.empty()) msg["content"] = r.content;
  if (!r.reasoning.empty()) msg["reasoning_content"] = r.reasoning;
  if (!r.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(r.tool_calls);
  msg["refusal"] = nullptr;
  ojson choice = {{"index", 0}, {"message", msg}, {"logprobs", nullptr}, {"finish_reason", r.finish_reason}};
  if (logprobs) choice["logprobs"] = chat_logprobs_json(*logprobs, tok);
  return {{"id", m.id},
          {"object", "chat.completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", ojson::array({choice})},
          {"usage", usage_json(r)},
          {"system_fingerprint", nullptr}};
}

ojson chat_delta_json(const ParsedDelta& d) {
  ojson o = ojson::object();
  if (!d.reasoning.empty()) o["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) o["content"] = d.content;
  if (!d.tool_calls.empty()) {
    ojson a = ojson::array();
    for (const auto& t : d.tool_calls) {
      ojson c = {{"index", t.index}};
      if (!t.id.empty()) {
        c["id"] = t.id;
        c["type"] = "function";
      }
      ojson f = ojson::object();
      if (!t.name.empty()) f["name"] = t.name;
      f["arguments"] = t.arguments;
      c["function"] = f;
      a.push_back(std::move(c));
    }
    o["tool_calls"] = a;
  }
  return o;
}

ojson chat_chunk_json(const ResponseMeta& m, ojson delta, const std::string& finish_reason, ojson logprobs,
                      bool include_usage) {
  ojson choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}};
  if (!finish_reason.empty()) choice["finish_reason"] = finish_reason;
  ojson c = {{"id", m.id},
             {"object", "chat.completion.chunk"},
             {"created", m.created},
             {"model", m.model},
             {"system_fingerprint", nullptr},
             {"choices", ojson::array({choice})}};
  if (include_usage) c["usage"] = nullptr;
  return c;
}

ojson usage_chunk_json(const ResponseMeta& m, const char* object, const GenResult& r) {
  return {{"id", m.id},       {"object", object},           {"created", m.created},
          {"model", m.model}, {"choices", ojson::array()}, {"usage", usage_json(r)}};
}

ojson completion_logprobs_json(const std::vector<TokenInfo>& toks, const Tokenizer& tok, size_t text_offset) {
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offs = ojson::array();
  for (const auto& t : toks) {
    std::string s = tok.decode({t.id});
    tokens.push_back(s);
    lps.push_back(t.logprob);
    ojson top = ojson::object();
    for (const auto& a : t.top) top[tok.decode({a.id})] = a.logprob;
    tops.push_back(top);
    offs.push_back(text_offset);
    text_offset += s.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

ojson completion_json(const ResponseMeta& m, const std::string& text, const GenResult& r, ojson logprobs) {
  ojson choice = {{"text", text}, {"index", 0}, {"logprobs", std::move(logprobs)}, {"finish_reason", r.finish_reason}};
  return {{"id", m.id},       {"object", "text_completion"},        {"created", m.created},
          {"model", m.model}, {"choices", ojson::array({choice})}, {"usage", usage_json(r)}};
}

ojson completion_chunk_json(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                            ojson logprobs, bool include_usage) {
  ojson choice = {{"text", text}, {"index", 0}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}};
  if (!finish_reason.empty()) choice["finish_reason"] = finish_reason;
  ojson c = {{"id", m.id},       {"object", "text_completion"},        {"created", m.created},
             {"model", m.model}, {"choices", ojson::array({choice})}};
  if (include_usage) c["usage"] = nullptr;
  return c;
}

}  // namespace lily
