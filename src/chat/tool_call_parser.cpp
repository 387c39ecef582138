#include "chat/tool_call_parser.h"

#include <algorithm>

#include "chat/tag_match.h"

namespace lily {

namespace {

constexpr std::size_t kMaxNameLength = 256;

std::string_view trim(std::string_view s) {
  std::size_t b = tags::skip_space(s, 0);
  std::size_t e = s.size();
  while (e > b && tags::is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Start of a possibly incomplete closing tag at the end of `text`: searches resume there.
std::size_t resume_point(std::size_t current, std::size_t size, std::size_t tag_size) {
  std::size_t back = std::min(size, tag_size - 1);
  return std::max(current, size - back);
}

// Model output nested deeper than this is not taken as JSON: the value would later be serialised (and
// compared, copied) recursively, and a reply can nest brackets thousands deep.
constexpr int kMaxJsonDepth = 64;

bool nests_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// Parses without throwing; a discarded value means "not JSON".
nlohmann::json parse_quiet(std::string_view text) {
  if (nests_deeper_than(text, kMaxJsonDepth)) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace

void ToolCallScanner::append(std::string_view text) {
  if (status_ != Status::Open) return;
  body_.append(text);
  advance();
}

void ToolCallScanner::advance() {
  while (status_ == Status::Open && step()) {
  }
}

bool ToolCallScanner::step() {
  std::string_view body = body_;
  switch (phase_) {
    case Phase::Lead: {
      std::size_t p = tags::skip_space(body, pos_);
      if (p == body.size()) return false;
      pos_ = p;
      if (body[p] == '{') {
        phase_ = Phase::Json;
        value_start_ = scan_ = p;
        return true;
      }
      std::string_view rest = body.substr(p);
      if (starts_with(rest, tags::kFunctionOpen)) {
        pos_ += tags::kFunctionOpen.size();
        phase_ = Phase::FunctionName;
        return true;
      }
      if (!tags::is_proper_prefix(rest, tags::kFunctionOpen)) status_ = Status::Invalid;
      return false;
    }
    case Phase::FunctionName:
      if (!read_name(name_)) return false;
      has_name_ = true;
      phase_ = Phase::BetweenParams;
      return true;
    case Phase::BetweenParams: {
      std::size_t p = tags::skip_space(body, pos_);
      if (p == body.size()) return false;
      pos_ = p;
      std::string_view rest = body.substr(p);
      if (starts_with(rest, tags::kParameterOpen)) {
        pos_ += tags::kParameterOpen.size();
        phase_ = Phase::ParamName;
        return true;
      }
      if (starts_with(rest, tags::kFunctionClose)) {
        pos_ += tags::kFunctionClose.size();
        phase_ = Phase::AfterFunction;
        return true;
      }
      // Anything else, including </tool_call> with </function> missing, makes the call malformed.
      if (!tags::is_proper_prefix(rest, tags::kParameterOpen) &&
          !tags::is_proper_prefix(rest, tags::kFunctionClose))
        status_ = Status::Invalid;
      return false;
    }
    case Phase::ParamName:
      if (!read_name(param_name_)) return false;
      phase_ = Phase::Value;
      value_start_ = scan_ = pos_;
      return true;
    case Phase::Value:
      return scan_value();
    case Phase::AfterFunction: {
      std::size_t p = tags::skip_space(body, pos_);
      if (p == body.size()) return false;
      pos_ = p;
      std::string_view rest = body.substr(p);
      if (starts_with(rest, tags::kToolCallClose)) {
        end_ = p + tags::kToolCallClose.size();
        status_ = Status::Done;
      } else if (!tags::is_proper_prefix(rest, tags::kToolCallClose)) {
        status_ = Status::Invalid;
      }
      return false;
    }
    case Phase::Json:
      return scan_json();
  }
  return false;
}

// Reads NAME of "<function=NAME>" / "<parameter=NAME>" starting at pos_. False while the '>' has not
// arrived (or when the name is malformed, which also sets Invalid).
bool ToolCallScanner::read_name(std::string& out) {
  std::string_view body = body_;
  std::size_t gt = body.find('>', pos_);
  std::string_view raw = body.substr(pos_, gt == std::string_view::npos ? std::string_view::npos : gt - pos_);
  if (raw.find_first_of("\n<") != std::string_view::npos || raw.size() > kMaxNameLength) {
    status_ = Status::Invalid;
    return false;
  }
  if (gt == std::string_view::npos) return false;
  std::string_view name = trim(raw);
  if (name.empty()) {
    status_ = Status::Invalid;
    return false;
  }
  out.assign(name);
  pos_ = gt + 1;
  return true;
}

// A value ends at a </parameter> that is followed (after whitespace and any duplicated
// </parameter>, which Qwen3.6 sometimes emits) by the next tag of the call. Any other </parameter>
// is part of the value: code and XML arguments may contain the text.
bool ToolCallScanner::scan_value() {
  std::string_view body = body_;
  for (;;) {
    std::size_t q = body.find(tags::kParameterClose, scan_);
    if (q == std::string_view::npos) {
      scan_ = resume_point(scan_, body.size(), tags::kParameterClose.size());
      return false;
    }
    std::size_t f = q + tags::kParameterClose.size();
    for (;;) {
      f = tags::skip_space(body, f);
      if (!starts_with(body.substr(f), tags::kParameterClose)) break;
      f += tags::kParameterClose.size();
    }
    std::string_view rest = body.substr(f);
    if (starts_with(rest, tags::kParameterOpen) || starts_with(rest, tags::kFunctionClose) ||
        starts_with(rest, tags::kToolCallClose)) {
      std::string_view value = body.substr(value_start_, q - value_start_);
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      params_.emplace_back(param_name_, std::string(value));
      pos_ = f;
      phase_ = Phase::BetweenParams;
      return true;
    }
    if (rest.empty() || tags::is_proper_prefix(rest, tags::kParameterClose) ||
        tags::is_proper_prefix(rest, tags::kParameterOpen) ||
        tags::is_proper_prefix(rest, tags::kFunctionClose) ||
        tags::is_proper_prefix(rest, tags::kToolCallClose)) {
      scan_ = q;  // undecided until more text arrives
      return false;
    }
    scan_ = q + 1;
  }
}

// JSON form: a lexer tracks strings and nesting so that the object's end is found in one pass
// (a "</tool_call>" inside a JSON string is string text). The object is parsed once it closes, and
// only whitespace may separate it from </tool_call>.
bool ToolCallScanner::scan_json() {
  std::string_view body = body_;
  if (json_end_ == 0) {
    for (; scan_ < body.size(); ++scan_) {
      char c = body[scan_];
      if (json_in_string_) {
        if (json_escape_) json_escape_ = false;
        else if (c == '\\') json_escape_ = true;
        else if (c == '"') json_in_string_ = false;
      } else if (c == '"') {
        json_in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++json_depth_;
      } else if (c == '}' || c == ']') {
        if (--json_depth_ == 0) {
          json_end_ = scan_ + 1;
          break;
        }
      } else if (c == '<') {  // cannot occur in JSON outside a string: the object was cut off
        status_ = Status::Invalid;
        return false;
      }
    }
    if (json_end_ == 0) return false;
    status_ = Status::Invalid;
    if (!accept_json(body.substr(value_start_, json_end_ - value_start_))) return false;
    status_ = Status::Open;
  }
  std::size_t p = tags::skip_space(body, json_end_);
  std::string_view rest = body.substr(p);
  if (starts_with(rest, tags::kToolCallClose)) {
    end_ = p + tags::kToolCallClose.size();
    status_ = Status::Done;
  } else if (!rest.empty() && !tags::is_proper_prefix(rest, tags::kToolCallClose)) {
    status_ = Status::Invalid;
  }
  return false;
}

// Checks the shape {"name": "...", "arguments": {...}} ("parameters" also accepted; arguments given
// as a JSON string holding an object are decoded) and keeps name and arguments.
bool ToolCallScanner::accept_json(std::string_view text) {
  nlohmann::json j = parse_quiet(text);
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  nlohmann::json a = args == j.end() ? nlohmann::json::object() : *args;
  if (a.is_null()) a = nlohmann::json::object();
  if (a.is_string()) a = parse_quiet(a.get_ref<const std::string&>());
  if (!a.is_object()) return false;
  name_ = name->get<std::string>();
  has_name_ = true;
  json_args_ = std::move(a);
  return true;
}

namespace {

// The JSON-schema types a parameter accepts: "type" (a string or a list), anyOf / oneOf members.
void collect_types(const nlohmann::json& schema, std::vector<std::string>& out, int depth = 0) {
  if (!schema.is_object() || depth > 8) return;
  if (auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) out.push_back(t->get<std::string>());
    if (t->is_array())
      for (const auto& e : *t)
        if (e.is_string()) out.push_back(e.get<std::string>());
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (auto u = schema.find(key); u != schema.end() && u->is_array())
      for (const auto& e : *u) collect_types(e, out, depth + 1);
  if (out.empty() && schema.contains("properties")) out.emplace_back("object");
}

const nlohmann::json* find_parameter_schema(const nlohmann::json& tools, std::string_view function,
                                            std::string_view parameter) {
  if (!tools.is_array()) return nullptr;
  for (const auto& tool : tools) {
    if (!tool.is_object()) continue;
    auto fit = tool.find("function");
    const nlohmann::json& fn = fit != tool.end() && fit->is_object() ? *fit : tool;
    auto name = fn.find("name");
    if (name == fn.end() || !name->is_string() || name->get_ref<const std::string&>() != function) continue;
    auto params = fn.find("parameters");
    if (params == fn.end() || !params->is_object()) return nullptr;
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return nullptr;
    auto p = props->find(std::string(parameter));
    return p == props->end() ? nullptr : &*p;
  }
  return nullptr;
}

bool is_null_literal(std::string_view t) { return t == "null" || t == "None"; }

bool bool_literal(std::string_view t, bool& out) {
  if (t == "true" || t == "True") return out = true, true;
  if (t == "false" || t == "False") return out = false, true;
  return false;
}

}  // namespace

nlohmann::json convert_parameter(const nlohmann::json& tools, std::string_view function,
                                 std::string_view parameter, std::string_view raw) {
  std::vector<std::string> types;
  if (const nlohmann::json* schema = find_parameter_schema(tools, function, parameter))
    collect_types(*schema, types);
  std::string_view t = trim(raw);
  bool b = false;

  if (types.empty()) {  // unknown tool or parameter: a JSON literal if it is one, else the text
    if (is_null_literal(t)) return nullptr;
    if (bool_literal(t, b)) return b;
    nlohmann::json j = parse_quiet(t);
    if (!j.is_discarded() && !t.empty()) return j;
    return std::string(raw);
  }

  auto has = [&](const char* name) { return std::find(types.begin(), types.end(), name) != types.end(); };
  bool string_ok = has("string");
  if (is_null_literal(t) && (has("null") || !string_ok)) return nullptr;
  if (has("boolean") && bool_literal(t, b)) return b;
  if (has("integer") || has("number")) {
    nlohmann::json j = parse_quiet(t);
    if (j.is_number()) return j;
  }
  if (has("object") || has("array")) {
    nlohmann::json j = parse_quiet(t);
    if ((j.is_object() && has("object")) || (j.is_array() && has("array"))) return j;
  }
  return std::string(raw);
}

std::string dump_json(const nlohmann::json& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace lily
