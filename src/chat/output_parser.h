// Splits a Qwen3.5/3.6 generation into reasoning, content and tool calls, incrementally (for
// streaming) and as a final result. Malformed or truncated output never throws: it becomes content.
//
// Reasoning
//   - thinking_open_at_start (the generation prompt ended with "<think>\n"): output starts as
//     reasoning up to "</think>". A "<think>" the model repeats at the very start is dropped.
//   - otherwise output starts as content; a "<think>" at the very start (only newlines before it)
//     opens reasoning (older templates let the model write it). "<think>" anywhere else is text.
//   - "</think>" at the start of content (content still empty) is dropped: a stray close tag, e.g.
//     with thinking off or repeated after a tool call. Elsewhere in content it is text.
//   - No "</think>" before the end: everything is reasoning (the output was truncated), as vLLM does.
//   - Newlines: leading newlines of reasoning and of content, trailing newlines of reasoning, and
//     newlines directly before a tool call are dropped. vLLM's qwen3 parser splits at the tags and
//     keeps these newlines ("\n" before </think>, "\n\n" after it); we strip them as the model's own
//     chat template does when it splits an assistant message at </think> (reasoning strip('\n'),
//     content lstrip('\n')) and re-adds when it renders "<think>\n" + R + "\n</think>\n\n" + C,
//     so a reply fed back as history renders to the tokens the model produced. Trailing newlines of
//     content at the end of generation are dropped too (the template trims content).
//   - A tool call inside the reasoning block: Qwen3.5/3.6 sometimes opens "<tool_call>" without
//     closing "</think>" (vLLM #39056/#42021, llama.cpp #22684). Users expect a call the model makes to
//     be executed, not buried in reasoning_content, so — like vLLM and llama.cpp — "<tool_call>"
//     followed (after whitespace) by "<function=" or "{" ends the reasoning implicitly and is parsed
//     as a call; a later "</think>" then sits at the start of content and is dropped. A bare mention of
//     "<tool_call>" in the reasoning (not followed by a call body) stays reasoning text.
//
// Tool calls (only when parse_tool_calls)
//   - "<tool_call>" anywhere in content starts a call; see tool_call_parser.h for the body forms and
//     value conversion. Each call gets a unique id "call_" + 24 random alphanumerics.
//   - Streaming: the first delta of a call (index, id, name) is sent as soon as "<function=NAME>" is
//     complete; arguments follow one parameter at a time ('{"k":v' then ',"k2":v2' ... then '}'), so
//     the pieces concatenate to arguments_json. JSON-form calls are sent whole when they close.
//   - A call that cannot be valid (garbage body, missing </function>, bad JSON) or is still open at
//     finish(): its "<tool_call>" becomes content text and the text after it is parsed again as
//     content (so a later well-formed call still counts). If its first delta had already gone out in an
//     earlier delta, ParsedDelta::dropped_tool_calls names its index: the caller should disregard it.
//     Indices of dropped calls are not reused once sent.
//
// Streaming never emits text that may be the start of a tag ("<think>", "</think>", "<tool_call>")
// or newlines that may turn out to be dropped; it holds them until the next text decides. The final
// result does not depend on how the text is split into push() calls.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "chat/tool_call_parser.h"

namespace lily {

struct ToolCallOut {
  std::string id;
  std::string name;
  std::string arguments_json;  // a JSON object as a string
};

struct ParsedDelta {
  std::string reasoning;  // text for reasoning_content
  std::string content;    // text for content
  // OpenAI streaming shape: the first delta of a call carries index, id and name; later ones append
  // to the arguments of the same index.
  struct ToolDelta {
    int index;
    std::string id;
    std::string name;
    std::string arguments;
  };
  std::vector<ToolDelta> tool_calls;
  // Indices whose first delta went out earlier but whose call turned out malformed or unfinished; the
  // call's text now comes as content. Empty in well-formed output.
  std::vector<int> dropped_tool_calls;

  bool empty() const {
    return reasoning.empty() && content.empty() && tool_calls.empty() && dropped_tool_calls.empty();
  }
};

struct ParserOptions {
  bool thinking_open_at_start = false;  // the generation prompt ended with "<think>\n" (thinking on)
  bool parse_tool_calls = true;         // tools were given and tool_choice != none
  nlohmann::json tools;                 // OpenAI tools array: parameter JSON-schema types convert values
};

class OutputParser {
 public:
  explicit OutputParser(ParserOptions o);

  // Feeds decoded text as it is generated (split anywhere, even inside a UTF-8 sequence or a tag).
  ParsedDelta push(std::string_view text);
  // End of generation: flushes held-back text; an unfinished call becomes content. Later calls to
  // push() or finish() return empty deltas.
  ParsedDelta finish();

  // Final result accumulated over all pushes (and finish()).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCallOut>& tool_calls() const { return calls_; }

 private:
  enum class State { Reasoning, Content, ToolCall };
  enum class Field { Reasoning, Content };

  void run(ParsedDelta& d, bool final);
  bool step_reasoning(ParsedDelta& d, bool final);
  bool step_content(ParsedDelta& d, bool final);
  bool step_tool_call(ParsedDelta& d, bool final);
  void emit(Field f, std::string_view text, ParsedDelta& d);
  void send_call_progress(ParsedDelta& d);
  void append_arguments(ParsedDelta& d, const std::string& piece);
  void complete_call(ParsedDelta& d);
  void abandon_call(ParsedDelta& d);
  std::string new_id();

  ParserOptions opt_;
  State state_;
  bool reasoning_seen_;
  bool finished_ = false;
  std::string buf_;  // text not yet consumed (held back)
  std::string reasoning_, content_;
  std::size_t pending_reasoning_nl_ = 0, pending_content_nl_ = 0;  // held trailing newlines
  std::vector<ToolCallOut> calls_;

  std::optional<ToolCallScanner> scan_;  // the open call
  int call_index_ = -1;                  // its stream index once its first delta is sent
  std::string call_id_, call_args_;
  std::size_t call_params_sent_ = 0;
  int next_index_ = 0;

  std::mt19937_64 rng_;
  std::unordered_set<std::string> ids_;
};

}  // namespace lily
