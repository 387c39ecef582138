#include "server/request_parse.h"

#include <algorithm>
#include <cmath>

#include "server/json_limits.h"

namespace lily {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ApiError::ApiError(int s, std::string message, std::string p, std::string c, std::string t)
    : std::runtime_error(std::move(message)), status(s), type(std::move(t)), param(std::move(p)), code(std::move(c)) {
  if (type.empty()) {
    type = s == 401   ? "authentication_error"
           : s == 404 ? "not_found_error"
           : s == 429 ? "rate_limit_error"
           : s >= 500 ? "server_error"
                      : "invalid_request_error";
  }
}

ApiError bad_request(const std::string& message, const std::string& param) { return ApiError(400, message, param); }

const json* field(const json& b, const char* k) {
  auto it = b.find(k);
  if (it == b.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string str_field(const json& b, const char* k, const std::string& where, bool required) {
  const json* v = field(b, k);
  if (!v) {
    if (required) throw bad_request(where + "." + k + " is required", where + "." + k);
    return "";
  }
  if (!v->is_string()) throw bad_request(where + "." + k + " must be a string", where + "." + k);
  return v->get<std::string>();
}

std::string joined_text(const json& c, const std::string& where, const std::vector<std::string>& types,
                        const char* items, const char* type_word, const char* here) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request(where + " must be a string or an array of " + items, where);
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!c[i].is_object()) throw bad_request(w + " must be an object", w);
    const std::string type = str_field(c[i], "type", w, true);
    if (std::find(types.begin(), types.end(), type) == types.end())
      throw bad_request(w + ": " + type_word + " '" + type + "' is not supported" + here + " (text only)", w + ".type");
    s += str_field(c[i], "text", w, true);
  }
  return s;
}

namespace {

double get_number(const json& b, const char* k, double def, double lo, double hi) {
  const json* v = field(b, k);
  if (!v) return def;
  if (!v->is_number()) throw bad_request(std::string("'") + k + "' must be a number", k);
  double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    throw bad_request(std::string("'") + k + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                          " (got " + v->dump() + ")",
                      k);
  return d;
}

long long get_integer(const json& b, const char* k, long long def, long long lo, long long hi) {
  const json* v = field(b, k);
  if (!v) return def;
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::floor(d) != d) throw bad_request(std::string("'") + k + "' must be an integer", k);
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
      throw bad_request(std::string("'") + k + "' must be between " + std::to_string(lo) + " and " +
                            std::to_string(hi),
                        k);
    return static_cast<long long>(d);
  }
  if (!v->is_number_integer()) throw bad_request(std::string("'") + k + "' must be an integer", k);
  if (v->is_number_unsigned() && v->get<unsigned long long>() > static_cast<unsigned long long>(hi))
    throw bad_request(std::string("'") + k + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), k);
  long long x = v->get<long long>();
  if (x < lo || x > hi)
    throw bad_request(std::string("'") + k + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                          " (got " + std::to_string(x) + ")",
                      k);
  return x;
}

bool get_bool(const json& b, const char* k, bool def) {
  const json* v = field(b, k);
  if (!v) return def;
  if (!v->is_boolean()) throw bad_request(std::string("'") + k + "' must be a boolean", k);
  return v->get<bool>();
}

std::string get_string(const json& b, const char* k, const std::string& def = "") {
  const json* v = field(b, k);
  if (!v) return def;
  if (!v->is_string()) throw bad_request(std::string("'") + k + "' must be a string", k);
  return v->get<std::string>();
}

constexpr long long kMaxTokensLimit = 1 << 24;

void parse_common(const json& b, GenOptions& o) {
  o.model = get_string(b, "model");
  long long n = get_integer(b, "n", 1, 1, 128);
  if (n != 1) throw bad_request("only n=1 is supported (got n=" + std::to_string(n) + ")", "n");
  SamplerParams& s = o.sampling;
  s.temperature = static_cast<float>(get_number(b, "temperature", 1.0, 0.0, 2.0));
  s.top_p = static_cast<float>(get_number(b, "top_p", 1.0, 0.0, 1.0));
  long long k = get_integer(b, "top_k", 0, -1, 1 << 30);
  s.top_k = k < 0 ? 0 : static_cast<int>(k);
  s.min_p = static_cast<float>(get_number(b, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = static_cast<float>(get_number(b, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(get_number(b, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = static_cast<float>(get_number(b, "repetition_penalty", 1.0, 0.01, 10.0));
  if (const json* v = field(b, "seed")) {
    if (!v->is_number_integer()) throw bad_request("'seed' must be an integer", "seed");
    s.has_seed = true;
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  }
  if (const json* v = field(b, "stop")) {
    if (v->is_string()) {
      o.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 16) throw bad_request("'stop' may hold at most 16 strings", "stop");
      for (const auto& x : *v) {
        if (!x.is_string()) throw bad_request("'stop' must be a string or an array of strings", "stop");
        o.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad_request("'stop' must be a string or an array of strings", "stop");
    }
  }
  o.stream = get_bool(b, "stream", false);
  if (const json* v = field(b, "stream_options")) {
    if (!v->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    o.include_usage = get_bool(*v, "include_usage", false);
  }
  o.cache_key = get_string(b, "prompt_cache_key");
  o.user = get_string(b, "user");
}

// Message content: a string, null, or an array of text parts -> the template's form (string or parts).
ojson normalize_content(const json& c, const std::string& where) {
  if (c.is_null()) return "";
  if (c.is_string()) return c;
  if (!c.is_array()) throw bad_request(where + ".content must be a string or an array of content parts", where + ".content");
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& p = c[i];
    const std::string pw = where + ".content[" + std::to_string(i) + "]";
    if (p.is_string()) {
      text += p.get<std::string>();
      continue;
    }
    if (!p.is_object()) throw bad_request(pw + " must be an object", pw);
    std::string type = get_string(p, "type", "text");
    if (type != "text" && type != "input_text")
      throw bad_request(pw + ": content part type '" + type + "' is not supported (text only)", pw + ".type");
    const json* t = field(p, "text");
    if (!t || !t->is_string()) throw bad_request(pw + ".text must be a string", pw + ".text");
    text += t->get<std::string>();
  }
  return text;
}

ojson normalize_tool_calls(const json& tc, const std::string& where) {
  if (!tc.is_array()) throw bad_request(where + " must be an array", where);
  ojson out = ojson::array();
  for (size_t i = 0; i < tc.size(); ++i) {
    const json& c = tc[i];
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!c.is_object()) throw bad_request(w + " must be an object", w);
    const json* f = field(c, "function");
    if (!f || !f->is_object()) throw bad_request(w + ".function must be an object", w + ".function");
    const json* name = field(*f, "name");
    if (!name || !name->is_string()) throw bad_request(w + ".function.name must be a string", w + ".function.name");
    ojson args = ojson::object();
    if (const json* a = field(*f, "arguments")) {
      if (a->is_string()) {
        ojson parsed = parse_client_ojson(a->get<std::string>(), w + ".function.arguments", w + ".function.arguments");
        if (!parsed.is_object())
          throw bad_request(w + ".function.arguments must be a JSON object encoded as a string", w + ".function.arguments");
        args = std::move(parsed);
      } else if (a->is_object()) {
        args = ojson::parse(a->dump());
      } else {
        throw bad_request(w + ".function.arguments must be a string", w + ".function.arguments");
      }
    }
    ojson call = {{"type", "function"}, {"function", {{"name", name->get<std::string>()}, {"arguments", args}}}};
    if (const json* id = field(c, "id"); id && id->is_string()) call["id"] = id->get<std::string>();
    out.push_back(std::move(call));
  }
  return out;
}

ojson normalize_messages(const json& b) {
  const json* m = field(b, "messages");
  if (!m) throw bad_request("'messages' is required", "messages");
  if (!m->is_array() || m->empty()) throw bad_request("'messages' must be a non-empty array", "messages");
  ojson out = ojson::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string w = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) throw bad_request(w + " must be an object", w);
    const json* r = field(msg, "role");
    if (!r || !r->is_string()) throw bad_request(w + ".role must be a string", w + ".role");
    std::string role = r->get<std::string>();
    if (role == "developer") role = "system";
    ojson o = {{"role", role}};
    const json* content = field(msg, "content");
    if (role == "system" || role == "user" || role == "tool") {
      if (!content && role != "tool") throw bad_request(w + ".content is required", w + ".content");
      o["content"] = normalize_content(content ? *content : json(), w);
      if (role == "tool") {
        if (const json* id = field(msg, "tool_call_id")) {
          if (!id->is_string()) throw bad_request(w + ".tool_call_id must be a string", w + ".tool_call_id");
          o["tool_call_id"] = id->get<std::string>();
        }
      }
    } else if (role == "assistant") {
      o["content"] = normalize_content(content ? *content : json(), w);
      if (const json* rc = field(msg, "reasoning_content")) {
        if (!rc->is_string()) throw bad_request(w + ".reasoning_content must be a string", w + ".reasoning_content");
        o["reasoning_content"] = rc->get<std::string>();
      }
      if (const json* tc = field(msg, "tool_calls"); tc && !tc->empty())
        o["tool_calls"] = normalize_tool_calls(*tc, w + ".tool_calls");
    } else {
      throw bad_request(w + ".role '" + role + "' is not one of system, developer, user, assistant, tool", w + ".role");
    }
    if (const json* nm = field(msg, "name"); nm && nm->is_string()) o["name"] = nm->get<std::string>();
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

ChatRequest parse_chat_request(const json& b) {
  if (!b.is_object()) throw bad_request("the request body must be a JSON object");
  ChatRequest r;
  parse_common(b, r.opt);
  long long mt = get_integer(b, "max_completion_tokens", -1, 1, kMaxTokensLimit);
  if (mt < 0) mt = get_integer(b, "max_tokens", -1, 1, kMaxTokensLimit);
  r.opt.max_tokens = static_cast<int>(mt);
  r.opt.logprobs = get_bool(b, "logprobs", false);
  r.opt.top_logprobs = static_cast<int>(get_integer(b, "top_logprobs", 0, 0, 20));
  if (r.opt.top_logprobs > 0 && !r.opt.logprobs)
    throw bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  r.opt.sampling.top_logprobs = r.opt.top_logprobs;
  r.messages = normalize_messages(b);

  if (const json* t = field(b, "tools")) {
    if (!t->is_array()) throw bad_request("'tools' must be an array", "tools");
    for (size_t i = 0; i < t->size(); ++i) {
      const json& tool = (*t)[i];
      const std::string w = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object()) throw bad_request(w + " must be an object", w);
      if (get_string(tool, "type", "function") != "function")
        throw bad_request(w + ".type must be 'function'", w + ".type");
      const json* f = field(tool, "function");
      if (!f || !f->is_object()) throw bad_request(w + ".function must be an object", w + ".function");
      const json* nm = field(*f, "name");
      if (!nm || !nm->is_string() || nm->get<std::string>().empty())
        throw bad_request(w + ".function.name must be a non-empty string", w + ".function.name");
      if (const json* p = field(*f, "parameters"); p && !p->is_object())
        throw bad_request(w + ".function.parameters must be an object", w + ".function.parameters");
    }
    if (!t->empty()) r.tools = ojson::parse(t->dump());
  }
  if (const json* tc = field(b, "tool_choice")) {
    if (tc->is_string()) {
      r.tool_choice = tc->get<std::string>();
      if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
        throw bad_request("'tool_choice' must be 'auto', 'none', 'required' or a function object", "tool_choice");
    } else if (tc->is_object()) {
      const json* f = field(*tc, "function");
      const json* nm = f && f->is_object() ? field(*f, "name") : nullptr;
      if (!nm || !nm->is_string()) throw bad_request("'tool_choice.function.name' must be a string", "tool_choice");
      r.tool_choice = "function";
      r.tool_choice_name = nm->get<std::string>();
    } else {
      throw bad_request("'tool_choice' must be a string or an object", "tool_choice");
    }
    if (r.tool_choice == "required" || r.tool_choice == "function") {
      if (r.tools.is_null()) throw bad_request("'tool_choice' " + r.tool_choice + " needs 'tools'", "tool_choice");
    }
    if (r.tool_choice == "function") {
      bool found = false;
      for (const auto& t : r.tools)
        if (t["function"]["name"] == r.tool_choice_name) found = true;
      if (!found) throw bad_request("'tool_choice' names function '" + r.tool_choice_name + "', which is not in 'tools'", "tool_choice");
    }
  }
  r.parallel_tool_calls = get_bool(b, "parallel_tool_calls", true);
  if (const json* rf = field(b, "response_format")) {
    if (!rf->is_object()) throw bad_request("'response_format' must be an object", "response_format");
    std::string type = get_string(*rf, "type", "text");
    if (type != "text" && type != "json_object" && type != "json_schema")
      throw bad_request("response_format type must be 'text', 'json_object' or 'json_schema'", "response_format");
    r.response_format = type;
    if (type == "json_schema") {
      const json* js = field(*rf, "json_schema");
      if (!js || !js->is_object())
        throw bad_request("'response_format.json_schema' must be an object with a 'schema'", "response_format.json_schema");
      const json* schema = field(*js, "schema");
      if (!schema || !(schema->is_object() || schema->is_boolean()))
        throw bad_request("'response_format.json_schema.schema' must be a JSON Schema object", "response_format.json_schema.schema");
      try {
        r.json_schema = JsonSchema::compile(*schema);
      } catch (const SchemaError& e) {
        throw bad_request(std::string("response_format.json_schema.schema: ") + e.what(), "response_format.json_schema.schema");
      }
    }
    if (type != "text" && (r.tool_choice == "required" || r.tool_choice == "function"))
      throw bad_request("response_format " + type + " cannot be combined with tool_choice '" + r.tool_choice +
                            "': the reply must be a JSON object, not a tool call",
                        "response_format");
  }
  if (const json* k = field(b, "chat_template_kwargs")) {
    if (!k->is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    r.template_kwargs = ojson::parse(k->dump());
    if (const json* et = field(*k, "enable_thinking")) {
      if (!et->is_boolean()) throw bad_request("'chat_template_kwargs.enable_thinking' must be a boolean", "chat_template_kwargs");
      r.enable_thinking = et->get<bool>();
      r.thinking_explicit = true;
    }
    if (const json* pt = field(*k, "preserve_thinking"); pt && !pt->is_boolean())
      throw bad_request("'chat_template_kwargs.preserve_thinking' must be a boolean", "chat_template_kwargs");
  }
  return r;
}

CompletionRequest parse_completion_request(const json& b) {
  if (!b.is_object()) throw bad_request("the request body must be a JSON object");
  CompletionRequest r;
  parse_common(b, r.opt);
  r.opt.max_tokens = static_cast<int>(get_integer(b, "max_tokens", 16, 1, kMaxTokensLimit));
  // Text completions: `logprobs` is the number of alternatives (0..5 in OpenAI; up to 20 here).
  if (const json* lp = field(b, "logprobs")) {
    if (lp->is_boolean()) {
      r.opt.logprobs = lp->get<bool>();
    } else {
      r.opt.top_logprobs = static_cast<int>(get_integer(b, "logprobs", 0, 0, 20));
      r.opt.logprobs = true;
    }
  }
  r.opt.sampling.top_logprobs = r.opt.top_logprobs;
  r.echo = get_bool(b, "echo", false);
  if (get_integer(b, "best_of", 1, 1, 128) != 1) throw bad_request("only best_of=1 is supported", "best_of");
  const json* p = field(b, "prompt");
  if (!p) throw bad_request("'prompt' is required", "prompt");
  auto ids_from = [&](const json& a) {
    std::vector<int32_t> ids;
    for (const auto& x : a) {
      if (!x.is_number_integer() || x.get<long long>() < 0 || x.get<long long>() > INT32_MAX)
        throw bad_request("'prompt' token ids must be non-negative integers", "prompt");
      ids.push_back(static_cast<int32_t>(x.get<long long>()));
    }
    return ids;
  };
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
  } else if (p->is_array() && !p->empty()) {
    const json& first = (*p)[0];
    if (first.is_string() || first.is_array()) {
      if (p->size() != 1) throw bad_request("only one prompt per request is supported", "prompt");
      if (first.is_string()) r.prompt = first.get<std::string>();
      else r.prompt_ids = ids_from(first);
    } else {
      r.prompt_ids = ids_from(*p);
    }
    if (!r.prompt && r.prompt_ids.empty()) throw bad_request("'prompt' is empty", "prompt");
  } else {
    throw bad_request("'prompt' must be a string, an array of token ids or an array with one string", "prompt");
  }
  return r;
}

}  // namespace lily
