#include "chat/output_parser.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "chat/tag_match.h"

namespace lily {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

void strip_leading_newlines(std::string& s) {
  std::size_t n = 0;
  while (n < s.size() && s[n] == '\n') ++n;
  s.erase(0, n);
}

std::uint64_t seed() {
  std::uint64_t s = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  try {
    std::random_device rd;
    s ^= (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  } catch (...) {  // no entropy source: the clock alone still differs between parsers
  }
  return s;
}

}  // namespace

OutputParser::OutputParser(ParserOptions o)
    : opt_(std::move(o)),
      state_(opt_.thinking_open_at_start ? State::Reasoning : State::Content),
      reasoning_seen_(opt_.thinking_open_at_start),
      rng_(seed() ^ reinterpret_cast<std::uintptr_t>(this)) {}

ParsedDelta OutputParser::push(std::string_view text) {
  ParsedDelta d;
  if (finished_) return d;
  buf_.append(text);
  run(d, false);
  return d;
}

ParsedDelta OutputParser::finish() {
  ParsedDelta d;
  if (finished_) return d;
  run(d, true);
  pending_reasoning_nl_ = pending_content_nl_ = 0;  // trailing newlines at the end are dropped
  finished_ = true;
  return d;
}

void OutputParser::run(ParsedDelta& d, bool final) {
  for (;;) {
    bool more = false;
    switch (state_) {
      case State::Reasoning: more = step_reasoning(d, final); break;
      case State::Content: more = step_content(d, final); break;
      case State::ToolCall: more = step_tool_call(d, final); break;
    }
    if (!more) return;
  }
}

// Appends text to a field. Leading newlines of an empty field are dropped; trailing newlines are held
// (pending) until more text of the same field shows they are inside it.
void OutputParser::emit(Field f, std::string_view text, ParsedDelta& d) {
  std::string& acc = f == Field::Reasoning ? reasoning_ : content_;
  std::size_t& pending = f == Field::Reasoning ? pending_reasoning_nl_ : pending_content_nl_;
  std::string& out = f == Field::Reasoning ? d.reasoning : d.content;
  if (acc.empty())
    while (!text.empty() && text.front() == '\n') text.remove_prefix(1);
  std::size_t body = text.size();
  while (body > 0 && text[body - 1] == '\n') --body;
  if (body == 0) {
    pending += text.size();
    return;
  }
  std::string piece(pending, '\n');
  piece.append(text.substr(0, body));
  pending = text.size() - body;
  acc += piece;
  out += piece;
}

bool OutputParser::step_reasoning(ParsedDelta& d, bool final) {
  if (reasoning_.empty()) {
    strip_leading_newlines(buf_);
    if (starts_with(buf_, tags::kThinkOpen)) {  // the model repeated the open tag of the prompt
      buf_.erase(0, tags::kThinkOpen.size());
      return true;
    }
    if (!final && tags::is_proper_prefix(buf_, tags::kThinkOpen)) return false;
  }
  const std::size_t npos = std::string::npos;
  std::size_t close = buf_.find(tags::kThinkClose);
  std::size_t call = opt_.parse_tool_calls ? buf_.find(tags::kToolCallOpen) : npos;

  if (call != npos && (close == npos || call < close)) {
    // Implicit end of reasoning when a call body follows; a mere mention stays reasoning.
    std::size_t after = call + tags::kToolCallOpen.size();
    std::string_view rest = std::string_view(buf_).substr(tags::skip_space(buf_, after));
    bool opens = starts_with(rest, tags::kFunctionOpen) || (!rest.empty() && rest.front() == '{');
    bool undecided = rest.empty() || tags::is_proper_prefix(rest, tags::kFunctionOpen);
    emit(Field::Reasoning, std::string_view(buf_).substr(0, call), d);
    buf_.erase(0, call);
    if (opens) {
      pending_reasoning_nl_ = 0;
      state_ = State::Content;
      return true;
    }
    if (!final && undecided) return false;  // wait for the text after <tool_call>
    emit(Field::Reasoning, tags::kToolCallOpen, d);  // not a call: the tag is reasoning text
    buf_.erase(0, tags::kToolCallOpen.size());
    return true;
  }
  if (close != npos) {
    emit(Field::Reasoning, std::string_view(buf_).substr(0, close), d);
    buf_.erase(0, close + tags::kThinkClose.size());
    pending_reasoning_nl_ = 0;
    state_ = State::Content;
    return true;
  }
  std::size_t hold = 0;
  if (!final)
    hold = opt_.parse_tool_calls ? tags::held_suffix(buf_, {tags::kThinkClose, tags::kToolCallOpen})
                                 : tags::held_suffix(buf_, {tags::kThinkClose});
  emit(Field::Reasoning, std::string_view(buf_).substr(0, buf_.size() - hold), d);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

bool OutputParser::step_content(ParsedDelta& d, bool final) {
  if (content_.empty()) {
    strip_leading_newlines(buf_);
    bool may_open = !reasoning_seen_ && next_index_ == 0 && calls_.empty();
    if (may_open && starts_with(buf_, tags::kThinkOpen)) {
      buf_.erase(0, tags::kThinkOpen.size());
      reasoning_seen_ = true;
      state_ = State::Reasoning;
      return true;
    }
    if (starts_with(buf_, tags::kThinkClose)) {  // stray close tag: nothing to close
      buf_.erase(0, tags::kThinkClose.size());
      return true;
    }
    if (!final && (tags::is_proper_prefix(buf_, tags::kThinkClose) ||
                   (may_open && tags::is_proper_prefix(buf_, tags::kThinkOpen))))
      return false;
  }
  std::size_t call = opt_.parse_tool_calls ? buf_.find(tags::kToolCallOpen) : std::string::npos;
  if (call != std::string::npos) {
    emit(Field::Content, std::string_view(buf_).substr(0, call), d);
    buf_.erase(0, call + tags::kToolCallOpen.size());
    scan_.emplace();
    call_index_ = -1;
    call_id_.clear();
    call_args_.clear();
    call_params_sent_ = 0;
    state_ = State::ToolCall;
    return true;
  }
  std::size_t hold = !final && opt_.parse_tool_calls ? tags::held_suffix(buf_, {tags::kToolCallOpen}) : 0;
  emit(Field::Content, std::string_view(buf_).substr(0, buf_.size() - hold), d);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

bool OutputParser::step_tool_call(ParsedDelta& d, bool final) {
  scan_->append(buf_);
  buf_.clear();
  switch (scan_->status()) {
    case ToolCallScanner::Status::Done:
      complete_call(d);
      return true;
    case ToolCallScanner::Status::Invalid:
      abandon_call(d);
      return true;
    case ToolCallScanner::Status::Open:
      if (final) {
        abandon_call(d);
        return true;
      }
      send_call_progress(d);
      return false;
  }
  return false;
}

void OutputParser::append_arguments(ParsedDelta& d, const std::string& piece) {
  call_args_ += piece;
  if (!d.tool_calls.empty() && d.tool_calls.back().index == call_index_)
    d.tool_calls.back().arguments += piece;
  else
    d.tool_calls.push_back({call_index_, "", "", piece});
}

// XML form: first delta once the name is known, then one argument piece per finished parameter.
void OutputParser::send_call_progress(ParsedDelta& d) {
  if (scan_->is_json_form() || !scan_->has_name()) return;
  if (call_index_ < 0) {
    call_index_ = next_index_++;
    call_id_ = new_id();
    d.tool_calls.push_back({call_index_, call_id_, scan_->name(), ""});
  }
  const auto& params = scan_->params();
  for (; call_params_sent_ < params.size(); ++call_params_sent_) {
    const auto& [key, raw] = params[call_params_sent_];
    std::string piece = call_params_sent_ == 0 ? "{" : ",";
    piece += dump_json(key);
    piece += ':';
    piece += dump_json(convert_parameter(opt_.tools, scan_->name(), key, raw));
    append_arguments(d, piece);
  }
}

void OutputParser::complete_call(ParsedDelta& d) {
  if (scan_->is_json_form()) {
    call_index_ = next_index_++;
    call_id_ = new_id();
    call_args_ = dump_json(scan_->json_arguments());
    d.tool_calls.push_back({call_index_, call_id_, scan_->name(), call_args_});
  } else {
    send_call_progress(d);
    append_arguments(d, call_params_sent_ == 0 ? "{}" : "}");
  }
  calls_.push_back({call_id_, scan_->name(), call_args_});
  pending_content_nl_ = 0;  // the newlines that separated content from the call
  buf_ = scan_->body().substr(scan_->end());
  scan_.reset();
  state_ = State::Content;
}

// The call cannot be valid (or never closed): its open tag is content, and the text after the tag is
// parsed again as content, so a later well-formed call is still found.
void OutputParser::abandon_call(ParsedDelta& d) {
  if (call_index_ >= 0) {
    auto same = [&](const ParsedDelta::ToolDelta& t) { return t.index == call_index_; };
    bool first_delta_here = std::any_of(d.tool_calls.begin(), d.tool_calls.end(),
                                        [&](const auto& t) { return same(t) && !t.id.empty(); });
    d.tool_calls.erase(std::remove_if(d.tool_calls.begin(), d.tool_calls.end(), same), d.tool_calls.end());
    if (first_delta_here) {
      if (call_index_ == next_index_ - 1) --next_index_;  // never sent: the index is free again
    } else {
      d.dropped_tool_calls.push_back(call_index_);
    }
  }
  emit(Field::Content, tags::kToolCallOpen, d);
  buf_ = scan_->body() + buf_;
  scan_.reset();
  call_index_ = -1;
  state_ = State::Content;
}

std::string OutputParser::new_id() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  for (;;) {
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng_)];
    if (ids_.insert(id).second) return id;
  }
}

}  // namespace lily
