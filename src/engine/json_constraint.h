// Incremental JSON validator for `response_format: {"type": "json_object"}`: a pushdown state machine over
// bytes that says whether text is still a prefix of some JSON text whose top-level value is an object
// (RFC 8259 syntax: objects, arrays, strings with escapes and \uXXXX, numbers, true/false/null,
// whitespace; strings must be well-formed UTF-8 and free of raw control characters; a \u escape of a
// surrogate must be a high one directly followed by a low one, as strict parsers require). Leading whitespace
// is allowed; once the object is closed only whitespace may follow. One limit beyond the grammar: a run
// of whitespace outside strings is at most kMaxWhitespaceRun bytes (enough for any indentation a model
// writes), so constrained decoding cannot loop on whitespace forever, a known JSON-mode failure.
//
// The whole state is a few bytes plus a bit stack (object/array per nesting level, up to kMaxDepth), so
// copying it is O(1) and no call allocates: accepts() runs the bytes on a copy.
#pragma once
#include <cstdint>
#include <string_view>

namespace lily {

class JsonConstraint {
 public:
  static constexpr int kMaxDepth = 128;        // deeper nesting is rejected
  static constexpr int kUnreachable = 1 << 30;  // min_close_bytes() after an invalid byte
  static constexpr int kMaxWhitespaceRun = 64;

  // Would the text so far followed by `more` still be a valid prefix?
  bool accepts(std::string_view more) const;
  // Appends `more`. An invalid byte leaves the constraint failed: nothing is accepted any more.
  void advance(std::string_view more);
  // The top-level object is closed (the text so far is a whole JSON object, maybe with whitespace).
  bool complete() const { return mode_ == Mode::Done; }
  bool failed() const { return mode_ == Mode::Failed; }
  // The fewest bytes that turn the text so far into a whole object (0 when complete), e.g. 2 at the
  // start ("{}"), 3 inside a key string ("\":0" then the closers). Every state with a positive cost has a
  // single byte that lowers it by exactly one.
  int min_close_bytes() const;
  int depth() const { return depth_; }
  bool operator==(const JsonConstraint&) const = default;  // the same state

 private:
  enum class Mode : uint8_t {  // the string modes are Str..StrUtf8, in one block
    Start,        // before the top-level '{'
    ObjFirst,     // after '{': a key or '}'
    ObjKey,       // after ',' in an object: a key
    Colon,        // after a key
    Value,        // after ':' or after ',' in an array
    ArrFirst,     // after '[': a value or ']'
    AfterValue,   // after a value inside a container: ',' or the closer
    Str,          // inside a string
    StrEsc,       // after '\'
    StrHex,       // inside \uXXXX: aux_ digits left, surr_ what the digits so far say
    StrLowEsc,    // after a high-surrogate escape: '\' of the low one
    StrLowU,      // its 'u'
    StrUtf8,      // inside a multi-byte UTF-8 sequence: aux_ bytes left, next in [lo_, hi_]
    NumMinus,     // after '-'
    NumZero,      // a leading 0
    NumInt,       // integer digits (first 1-9)
    NumDot,       // after '.'
    NumFrac,      // fraction digits
    NumExp,       // after 'e' / 'E'
    NumExpSign,   // after the exponent's sign
    NumExpDigits, // exponent digits
    Literal,      // inside true/false/null: lit_ which, aux_ letters read
    Done,         // the top-level object is closed
    Failed,
  };

  bool step(unsigned char c);        // one byte: whitespace limit, then transition()
  bool transition(unsigned char c);
  bool value_start(unsigned char c);
  void value_done() { mode_ = depth_ == 0 ? Mode::Done : Mode::AfterValue; }
  bool push(bool object);
  bool top_is_object() const;
  bool close(bool object);

  Mode mode_ = Mode::Start;
  uint8_t aux_ = 0;
  uint8_t lit_ = 0;       // 0 true, 1 false, 2 null
  uint8_t lo_ = 0, hi_ = 0;
  enum class Surrogate : uint8_t { None, FirstD, High, Low };  // Low: this escape must be DC00-DFFF
  Surrogate surr_ = Surrogate::None;
  bool key_ = false;      // the open string is an object key
  uint8_t ws_run_ = 0;    // whitespace bytes just read outside strings
  uint16_t depth_ = 0;
  uint64_t stack_[kMaxDepth / 64] = {};  // bit d: container at depth d (0-based) is an object
};

}  // namespace lily
