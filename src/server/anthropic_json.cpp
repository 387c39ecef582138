#include "server/anthropic_json.h"

namespace lily {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// Text of a string or an array of text blocks (system prompts, tool_result content).
std::string block_text(const json& c, const std::string& where) {
  static const std::vector<std::string> kText = {"text"};
  return joined_text(c, where, kText, "text blocks", "block type", " here");
}

// One Anthropic message -> one or more chat-template messages (a user turn's tool_result blocks become
// "tool" messages, in order, before its text).
void convert_message(const json& m, size_t idx, json& out) {
  const std::string w = "messages[" + std::to_string(idx) + "]";
  if (!m.is_object()) throw bad_request(w + " must be an object", w);
  const std::string role = str_field(m, "role", w, true);
  if (role != "user" && role != "assistant")
    throw bad_request(w + ".role must be 'user' or 'assistant' (got '" + role + "'); the system prompt goes in 'system'",
                      w + ".role");
  const json* content = field(m, "content");
  if (!content) throw bad_request(w + ".content is required", w + ".content");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array()) throw bad_request(w + ".content must be a string or an array of content blocks", w + ".content");
  std::string text, thinking;
  json calls = json::array();
  for (size_t i = 0; i < content->size(); ++i) {
    const json& b = (*content)[i];
    const std::string bw = w + ".content[" + std::to_string(i) + "]";
    if (!b.is_object()) throw bad_request(bw + " must be an object", bw);
    const std::string type = str_field(b, "type", bw, true);
    if (type == "text") {
      text += str_field(b, "text", bw, true);
    } else if (type == "thinking" && role == "assistant") {
      thinking += str_field(b, "thinking", bw, true);
    } else if (type == "redacted_thinking" && role == "assistant") {
      // opaque to us: nothing to render
    } else if (type == "tool_use" && role == "assistant") {
      const json* input = field(b, "input");
      if (input && !input->is_object()) throw bad_request(bw + ".input must be an object", bw + ".input");
      calls.push_back({{"id", str_field(b, "id", bw, true)},
                       {"type", "function"},
                       {"function", {{"name", str_field(b, "name", bw, true)}, {"arguments", input ? *input : json::object()}}}});
    } else if (type == "tool_result" && role == "user") {
      std::string result;
      if (const json* c = field(b, "content")) result = block_text(*c, bw + ".content");
      const json* err = field(b, "is_error");
      if (err && !err->is_boolean()) throw bad_request(bw + ".is_error must be a boolean", bw + ".is_error");
      if (err && err->get<bool>()) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", str_field(b, "tool_use_id", bw, true)}, {"content", result}});
    } else {
      throw bad_request(bw + ": content block type '" + type + "' is not supported in a" +
                            (role == "user" ? " user" : "n assistant") + " message",
                        bw + ".type");
    }
  }
  if (role == "user") {
    if (!text.empty() || out.empty() || out.back()["role"] != "tool") out.push_back({{"role", "user"}, {"content", text}});
    return;
  }
  json a = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) a["reasoning_content"] = thinking;
  if (!calls.empty()) a["tool_calls"] = calls;
  out.push_back(std::move(a));
}

json convert_tools(const json& tools) {
  if (!tools.is_array()) throw bad_request("'tools' must be an array", "tools");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string w = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw bad_request(w + " must be an object", w);
    const std::string type = str_field(t, "type", w, false);
    if (!type.empty() && type != "custom")
      throw bad_request(w + ": tool type '" + type + "' is a server tool this server does not run (custom tools only)",
                        w + ".type");
    json f = {{"name", str_field(t, "name", w, true)}};
    if (const json* d = field(t, "description")) f["description"] = *d;
    const json* schema = field(t, "input_schema");
    if (!schema || !schema->is_object()) throw bad_request(w + ".input_schema must be an object", w + ".input_schema");
    f["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

json convert_tool_choice(const json& tc, json& chat) {
  if (!tc.is_object()) throw bad_request("'tool_choice' must be an object", "tool_choice");
  const std::string type = str_field(tc, "type", "tool_choice", true);
  if (const json* d = field(tc, "disable_parallel_tool_use")) {
    if (!d->is_boolean()) throw bad_request("'tool_choice.disable_parallel_tool_use' must be a boolean", "tool_choice");
    chat["parallel_tool_calls"] = !d->get<bool>();
  }
  if (type == "auto" || type == "none") return type;
  if (type == "any") return "required";
  if (type == "tool") return {{"type", "function"}, {"function", {{"name", str_field(tc, "name", "tool_choice", true)}}}};
  throw bad_request("'tool_choice.type' must be auto, any, tool or none (got '" + type + "')", "tool_choice.type");
}

}  // namespace

MessagesRequest parse_messages_request(const json& b, bool count_only) {
  if (!b.is_object()) throw bad_request("the request body must be a JSON object");
  MessagesRequest r;
  json chat = json::object();
  for (const char* k : {"model", "temperature", "top_p", "top_k", "stream"})
    if (const json* v = field(b, k)) chat[k] = *v;
  if (const json* t = field(b, "temperature"); t && t->is_number() && t->get<double>() > 1.0)
    throw bad_request("'temperature' must be between 0 and 1", "temperature");
  if (!count_only) {
    const json* mt = field(b, "max_tokens");
    if (!mt) throw bad_request("'max_tokens' is required", "max_tokens");
    chat["max_tokens"] = *mt;
  }
  if (const json* s = field(b, "stop_sequences")) {
    if (!s->is_array()) throw bad_request("'stop_sequences' must be an array of strings", "stop_sequences");
    chat["stop"] = *s;
  }
  if (const json* md = field(b, "metadata")) {
    if (!md->is_object()) throw bad_request("'metadata' must be an object", "metadata");
    if (const json* u = field(*md, "user_id")) {
      if (!u->is_string()) throw bad_request("'metadata.user_id' must be a string", "metadata.user_id");
      chat["user"] = *u;
    }
  }
  json messages = json::array();
  if (const json* sys = field(b, "system")) messages.push_back({{"role", "system"}, {"content", block_text(*sys, "system")}});
  const json* m = field(b, "messages");
  if (!m) throw bad_request("'messages' is required", "messages");
  if (!m->is_array() || m->empty()) throw bad_request("'messages' must be a non-empty array", "messages");
  for (size_t i = 0; i < m->size(); ++i) convert_message((*m)[i], i, messages);
  chat["messages"] = std::move(messages);
  if (const json* t = field(b, "tools"); t && !t->empty()) chat["tools"] = convert_tools(*t);
  if (const json* tc = field(b, "tool_choice")) chat["tool_choice"] = convert_tool_choice(*tc, chat);
  if (chat.contains("tool_choice") && !chat.contains("tools") && chat["tool_choice"] == "auto") chat.erase("tool_choice");

  if (const json* th = field(b, "thinking")) {
    if (!th->is_object()) throw bad_request("'thinking' must be an object", "thinking");
    const std::string type = str_field(*th, "type", "thinking", true);
    if (type == "enabled" || type == "adaptive") {
      r.thinking = true;
      if (const json* bt = field(*th, "budget_tokens")) {
        if (!bt->is_number_integer() || bt->get<long long>() < 1)
          throw bad_request("'thinking.budget_tokens' must be a positive integer", "thinking.budget_tokens");
        r.budget_tokens = static_cast<int>(std::min<long long>(bt->get<long long>(), 1 << 24));
        if (!count_only && chat["max_tokens"].is_number_integer() && bt->get<long long>() >= chat["max_tokens"].get<long long>())
          throw bad_request("'thinking.budget_tokens' must be less than 'max_tokens'", "thinking.budget_tokens");
      } else if (type == "enabled") {
        throw bad_request("'thinking.budget_tokens' is required when thinking is enabled", "thinking.budget_tokens");
      }
    } else if (type != "disabled") {
      throw bad_request("'thinking.type' must be enabled, adaptive or disabled (got '" + type + "')", "thinking.type");
    }
  }
  if (const json* oc = field(b, "output_config")) {
    if (!oc->is_object()) throw bad_request("'output_config' must be an object", "output_config");
    if (const json* f = field(*oc, "format")) {
      if (!f->is_object() || str_field(*f, "type", "output_config.format", true) != "json_schema")
        throw bad_request("'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}", "output_config.format");
      const json* schema = field(*f, "schema");
      if (!schema) throw bad_request("'output_config.format.schema' is required", "output_config.format.schema");
      chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
    }
  }
  // chat_template_kwargs (an extension, as on /v1/chat/completions) pass through; `thinking` sets
  // enable_thinking unless they name it.
  json kwargs = json::object();
  if (const json* k = field(b, "chat_template_kwargs")) {
    if (!k->is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    kwargs = *k;
  }
  if (!kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = r.thinking;
  chat["chat_template_kwargs"] = kwargs;
  r.chat = parse_chat_request(chat);
  return r;
}

ojson anthropic_error_json(const ApiError& e) {
  const int s = e.status;
  const char* type = s == 401   ? "authentication_error"
                     : s == 403 ? "permission_error"
                     : s == 404 ? "not_found_error"
                     : s == 413 ? "request_too_large"
                     : s == 429 ? "rate_limit_error"
                     : s == 503 ? "overloaded_error"
                     : s >= 500 ? "api_error"
                                : "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
}

std::string anthropic_stop_reason(const GenResult& r) {
  if (r.finish_reason == "tool_calls") return "tool_use";
  if (r.finish_reason == "length") return "max_tokens";
  if (!r.stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

ojson anthropic_usage_json(const GenResult& r) {
  return {{"input_tokens", r.prompt_tokens - r.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", r.cached_tokens},
          {"output_tokens", r.completion_tokens}};
}

ojson anthropic_message_json(const std::string& id, const std::string& model, const GenResult& r) {
  ojson content = ojson::array();
  if (!r.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", r.reasoning}, {"signature", ""}});
  if (!r.content.empty() || (r.tool_calls.empty() && r.reasoning.empty()))
    content.push_back({{"type", "text"}, {"text", r.content}});
  for (const auto& c : r.tool_calls) {
    ojson input = ojson::parse(c.arguments_json, nullptr, false);
    if (input.is_discarded() || !input.is_object()) input = ojson::object();
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input}});
  }
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", content},
          {"stop_reason", anthropic_stop_reason(r)},
          {"stop_sequence", r.stop_string.empty() ? ojson(nullptr) : ojson(r.stop_string)},
          {"usage", anthropic_usage_json(r)}};
}

}  // namespace lily
