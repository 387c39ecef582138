#include "server/responses_json.h"

namespace lily {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// A string, or an array of text parts (input_text / output_text / text / summary_text / reasoning_text).
std::string parts_text(const json& c, const std::string& where) {
  static const std::vector<std::string> kText = {"input_text", "output_text", "text", "summary_text", "reasoning_text"};
  return joined_text(c, where, kText, "content parts", "content part type", "");
}

// Input items -> chat messages. Consecutive assistant-side items (reasoning, assistant message,
// function_call) make one assistant message, as the model produced them in one turn.
void convert_items(const json& input, ojson& out) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return;
  }
  if (!input.is_array()) throw bad_request("'input' must be a string or an array of items", "input");
  ojson asst;  // open assistant message (null when none)
  auto flush = [&] {
    if (!asst.is_null()) out.push_back(std::move(asst));
    asst = nullptr;
  };
  auto assistant = [&]() -> ojson& {
    if (asst.is_null()) asst = {{"role", "assistant"}, {"content", ""}};
    return asst;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const json& it = input[i];
    const std::string w = "input[" + std::to_string(i) + "]";
    if (!it.is_object()) throw bad_request(w + " must be an object", w);
    std::string type = str_field(it, "type", w, false);
    if (type.empty()) type = "message";
    if (type == "message") {
      std::string role = str_field(it, "role", w, true);
      const json* c = field(it, "content");
      if (!c) throw bad_request(w + ".content is required", w + ".content");
      const std::string text = parts_text(*c, w + ".content");
      if (role == "assistant") {
        ojson& a = assistant();
        if (a.contains("tool_calls")) {  // text after a call in the same turn: a new assistant message
          flush();
          assistant()["content"] = text;
        } else {
          a["content"] = a["content"].get<std::string>() + text;
        }
        continue;
      }
      if (role == "developer") role = "system";
      if (role != "user" && role != "system")
        throw bad_request(w + ".role must be user, system, developer or assistant (got '" + role + "')", w + ".role");
      flush();
      out.push_back({{"role", role}, {"content", text}});
    } else if (type == "reasoning") {
      std::string text;
      if (const json* c = field(it, "content")) text = parts_text(*c, w + ".content");
      else if (const json* s = field(it, "summary")) text = parts_text(*s, w + ".summary");
      ojson& a = assistant();
      a["reasoning_content"] = (a.contains("reasoning_content") ? a["reasoning_content"].get<std::string>() : "") + text;
    } else if (type == "function_call") {
      const std::string args = str_field(it, "arguments", w, true);
      ojson parsed = ojson::parse(args, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object())
        throw bad_request(w + ".arguments must be a JSON object encoded as a string", w + ".arguments");
      ojson& a = assistant();
      if (!a.contains("tool_calls")) a["tool_calls"] = ojson::array();
      a["tool_calls"].push_back({{"id", str_field(it, "call_id", w, true)},
                                 {"type", "function"},
                                 {"function", {{"name", str_field(it, "name", w, true)}, {"arguments", parsed}}}});
    } else if (type == "function_call_output") {
      flush();
      const json* o = field(it, "output");
      if (!o) throw bad_request(w + ".output is required", w + ".output");
      out.push_back({{"role", "tool"}, {"tool_call_id", str_field(it, "call_id", w, true)}, {"content", parts_text(*o, w + ".output")}});
    } else {
      throw bad_request(w + ": item type '" + type +
                            "' is not supported (message, reasoning, function_call, function_call_output)",
                        w + ".type");
    }
  }
  flush();
}

json convert_tools(const json& tools) {
  if (!tools.is_array()) throw bad_request("'tools' must be an array", "tools");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string w = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw bad_request(w + " must be an object", w);
    const std::string type = str_field(t, "type", w, true);
    if (type != "function")
      throw bad_request(w + ": tool type '" + type + "' is a hosted tool this server does not run (function tools only)",
                        w + ".type");
    json f = {{"name", str_field(t, "name", w, true)}};
    if (const json* d = field(t, "description")) f["description"] = *d;
    if (const json* p = field(t, "parameters")) f["parameters"] = *p;
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

}  // namespace

std::string previous_response_id(const json& b) {
  if (!b.is_object()) return "";
  const json* p = field(b, "previous_response_id");
  if (!p) return "";
  if (!p->is_string()) throw bad_request("'previous_response_id' must be a string", "previous_response_id");
  return p->get<std::string>();
}

ResponsesRequest parse_responses_request(const json& b, const ojson& previous) {
  if (!b.is_object()) throw bad_request("the request body must be a JSON object");
  ResponsesRequest r;
  r.previous_response_id = previous_response_id(b);
  json chat = json::object();
  for (const char* k : {"model", "temperature", "top_p", "top_k", "stream", "user", "prompt_cache_key",
                        "parallel_tool_calls"})
    if (const json* v = field(b, k)) chat[k] = *v;
  if (const json* v = field(b, "max_output_tokens")) chat["max_tokens"] = *v;
  if (const json* s = field(b, "store")) {
    if (!s->is_boolean()) throw bad_request("'store' must be a boolean", "store");
    r.store = s->get<bool>();
  }
  ojson history = previous.is_array() ? previous : ojson::array();
  const json* input = field(b, "input");
  if (!input) throw bad_request("'input' is required", "input");
  convert_items(*input, history);
  if (history.empty()) throw bad_request("'input' is empty", "input");
  r.history = history;
  ojson messages = ojson::array();
  const std::string instructions = str_field(b, "instructions", "body", false);
  if (!instructions.empty()) messages.push_back({{"role", "system"}, {"content", instructions}});
  for (const auto& m : history) messages.push_back(m);
  chat["messages"] = json::parse(messages.dump());

  if (const json* t = field(b, "tools"); t && !t->empty()) chat["tools"] = convert_tools(*t);
  if (const json* tc = field(b, "tool_choice")) {
    if (tc->is_string()) {
      chat["tool_choice"] = *tc;
    } else if (tc->is_object() && str_field(*tc, "type", "tool_choice", true) == "function") {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", str_field(*tc, "name", "tool_choice", true)}}}};
    } else {
      throw bad_request("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}", "tool_choice");
    }
    if (!chat.contains("tools") && chat["tool_choice"] == "auto") chat.erase("tool_choice");
  }
  ojson text_echo = {{"format", {{"type", "text"}}}};
  if (const json* t = field(b, "text")) {
    if (!t->is_object()) throw bad_request("'text' must be an object", "text");
    if (const json* f = field(*t, "format")) {
      if (!f->is_object()) throw bad_request("'text.format' must be an object", "text.format");
      const std::string type = str_field(*f, "type", "text.format", true);
      json rf = {{"type", type}};
      if (type == "json_schema") {
        json js = {{"name", str_field(*f, "name", "text.format", false)}};
        if (const json* s = field(*f, "schema")) js["schema"] = *s;
        if (const json* s = field(*f, "strict")) js["strict"] = *s;
        rf["json_schema"] = js;
      }
      chat["response_format"] = rf;
      text_echo["format"] = ojson::parse(f->dump());
    }
  }
  bool thinking = true, thinking_given = false;
  ojson reasoning_echo = {{"effort", nullptr}, {"summary", nullptr}};
  if (const json* rs = field(b, "reasoning")) {
    if (!rs->is_object()) throw bad_request("'reasoning' must be an object", "reasoning");
    const std::string effort = str_field(*rs, "effort", "reasoning", false);
    if (!effort.empty()) {
      if (effort != "none" && effort != "minimal" && effort != "low" && effort != "medium" && effort != "high" &&
          effort != "xhigh")
        throw bad_request("'reasoning.effort' must be none, minimal, low, medium, high or xhigh", "reasoning.effort");
      thinking = effort != "none" && effort != "minimal";
      thinking_given = true;
      reasoning_echo["effort"] = effort;
    }
  }
  json kwargs = json::object();
  if (const json* k = field(b, "chat_template_kwargs")) {
    if (!k->is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    kwargs = *k;
  }
  // Without reasoning.effort the chat default applies: thinking on, but off for a JSON text.format.
  if (!kwargs.contains("enable_thinking") && thinking_given) kwargs["enable_thinking"] = thinking;
  chat["chat_template_kwargs"] = kwargs;
  r.chat = parse_chat_request(chat);

  ojson metadata = ojson::object();
  if (const json* md = field(b, "metadata")) {
    if (!md->is_object()) throw bad_request("'metadata' must be an object", "metadata");
    metadata = ojson::parse(md->dump());
  }
  r.echo = {{"instructions", instructions.empty() ? ojson(nullptr) : ojson(instructions)},
            {"max_output_tokens", r.chat.opt.max_tokens > 0 ? ojson(r.chat.opt.max_tokens) : ojson(nullptr)},
            {"metadata", metadata},
            {"parallel_tool_calls", r.chat.parallel_tool_calls},
            {"reasoning", reasoning_echo},
            {"temperature", r.chat.opt.sampling.temperature},
            {"text", text_echo},
            {"tool_choice", field(b, "tool_choice") ? ojson::parse(b["tool_choice"].dump()) : ojson("auto")},
            {"tools", field(b, "tools") ? ojson::parse(b["tools"].dump()) : ojson::array()},
            {"top_p", r.chat.opt.sampling.top_p},
            {"truncation", "disabled"},
            {"user", r.chat.opt.user.empty() ? ojson(nullptr) : ojson(r.chat.opt.user)}};
  return r;
}

ojson reasoning_item(const std::string& id, const std::string& text) {
  ojson content = ojson::array();
  if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"id", id}, {"type", "reasoning"}, {"summary", ojson::array()}, {"content", content}};
}

ojson message_item(const std::string& id, const std::string& text, bool done) {
  ojson content = ojson::array();
  if (done) content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}});
  return {{"id", id}, {"type", "message"}, {"status", done ? "completed" : "in_progress"}, {"role", "assistant"}, {"content", content}};
}

ojson function_call_item(const std::string& id, const std::string& call_id, const std::string& name,
                         const std::string& arguments, bool done) {
  return {{"id", id},
          {"type", "function_call"},
          {"status", done ? "completed" : "in_progress"},
          {"call_id", call_id},
          {"name", name},
          {"arguments", arguments}};
}

ojson output_items(const GenResult& r, ResponseIds& ids) {
  ojson out = ojson::array();
  if (!r.reasoning.empty()) out.push_back(reasoning_item(ids.reasoning, r.reasoning));
  if (!r.content.empty() || r.tool_calls.empty()) out.push_back(message_item(ids.message, r.content, true));
  for (size_t i = 0; i < r.tool_calls.size(); ++i) {
    const auto& c = r.tool_calls[i];
    out.push_back(function_call_item(i < ids.calls.size() ? ids.calls[i] : "fc_" + c.id, c.id, c.name, c.arguments_json, true));
  }
  return out;
}

ojson reply_message(const GenResult& r) {
  ojson m = {{"role", "assistant"}, {"content", r.content}};
  if (!r.reasoning.empty()) m["reasoning_content"] = r.reasoning;
  if (!r.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const auto& c : r.tool_calls) {
      ojson args = ojson::parse(c.arguments_json, nullptr, false);
      if (args.is_discarded() || !args.is_object()) args = ojson::object();
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", args}}}});
    }
    m["tool_calls"] = calls;
  }
  return m;
}

ojson responses_usage_json(const GenResult& r, int reasoning_tokens) {
  return {{"input_tokens", r.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", r.cached_tokens}}},
          {"output_tokens", r.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", r.prompt_tokens + r.completion_tokens}};
}

ojson response_object(const std::string& id, int64_t created, const std::string& model, const ResponsesRequest& req,
                      const GenResult* r, ojson output, int reasoning_tokens) {
  const bool incomplete = r && r->finish_reason == "length";
  ojson o = {{"id", id},
             {"object", "response"},
             {"created_at", created},
             {"status", !r ? "in_progress" : incomplete ? "incomplete" : "completed"},
             {"error", nullptr},
             {"incomplete_details", incomplete ? ojson{{"reason", "max_output_tokens"}} : ojson(nullptr)},
             {"model", model},
             {"output", std::move(output)},
             {"previous_response_id", req.previous_response_id.empty() ? ojson(nullptr) : ojson(req.previous_response_id)},
             {"store", req.store}};
  for (auto it = req.echo.begin(); it != req.echo.end(); ++it) o[it.key()] = it.value();
  o["usage"] = r ? responses_usage_json(*r, reasoning_tokens) : ojson(nullptr);
  return o;
}

}  // namespace lily
