// Parsing of one Qwen tool call: the text between <tool_call> and </tool_call>.
//
// Two body forms are accepted:
//   Qwen3.5/3.6 XML:  <function=NAME>  (<parameter=KEY> VALUE </parameter>)*  </function>
//   Qwen3 JSON:       {"name": NAME, "arguments": {...}}
// The scanner is fed the body as it is generated and decides as early as the text allows whether the
// call is complete, still open, or can no longer become a valid call. Every decision depends only on
// the text, never on how it was split into pieces.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lily {

class ToolCallScanner {
 public:
  enum class Status { Open, Done, Invalid };

  // Appends generated text after the opening <tool_call> and advances the scan.
  void append(std::string_view text);

  Status status() const { return status_; }
  bool is_json_form() const { return phase_ == Phase::Json; }
  // XML form: the function name once <function=NAME> is complete.
  bool has_name() const { return has_name_; }
  const std::string& name() const { return name_; }
  // XML form: parameters whose value is complete, in order, with raw value text (one leading and one
  // trailing newline already stripped).
  const std::vector<std::pair<std::string, std::string>>& params() const { return params_; }
  // JSON form, once Done: the arguments object.
  const nlohmann::json& json_arguments() const { return json_args_; }
  // Once Done: offset in body() just past </tool_call>; text after it belongs to the caller.
  std::size_t end() const { return end_; }
  const std::string& body() const { return body_; }

 private:
  enum class Phase { Lead, FunctionName, BetweenParams, ParamName, Value, AfterFunction, Json };
  void advance();
  bool step();  // one move of the state machine; false when it needs more text or is finished
  bool read_name(std::string& out);
  bool scan_value();
  bool scan_json();
  bool accept_json(std::string_view text);

  std::string body_;
  Status status_ = Status::Open;
  Phase phase_ = Phase::Lead;
  std::size_t pos_ = 0;          // parse position in body_
  std::size_t value_start_ = 0;  // Value: start of the raw value text
  std::size_t scan_ = 0;         // Value/Json: where the next closing-tag search starts
  bool has_name_ = false;
  std::string name_;
  std::string param_name_;
  std::vector<std::pair<std::string, std::string>> params_;
  nlohmann::json json_args_;
  std::size_t end_ = 0;
  // Json: lexer state and the offset just past the closing brace (0 while open)
  int json_depth_ = 0;
  bool json_in_string_ = false, json_escape_ = false;
  std::size_t json_end_ = 0;
};

// Converts one raw XML parameter value to JSON using the tool's JSON schema for that parameter
// (`tools` is the OpenAI tools array; unknown tools or parameters have no schema).
//   string → as is; integer/number → number when the text is one; boolean → true/false (also the
//   Python spellings True/False); object/array → parsed JSON when valid; null → null for "null"/"None".
//   A union of types (["integer","null"], anyOf/oneOf) tries each. No schema: a JSON literal when the
//   text is one (True/False/None included), else the string. Anything that fails to convert stays a
//   string. Never throws.
nlohmann::json convert_parameter(const nlohmann::json& tools, std::string_view function,
                                 std::string_view parameter, std::string_view raw);

// JSON text of `v` the way tool-call arguments are written (compact, UTF-8 kept, invalid UTF-8
// replaced by U+FFFD). Never throws.
std::string dump_json(const nlohmann::json& v);

}  // namespace lily
