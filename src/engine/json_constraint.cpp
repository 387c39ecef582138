#include "engine/json_constraint.h"

namespace lily {
namespace {

constexpr std::string_view kLiterals[3] = {"true", "false", "null"};

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonConstraint::accepts(std::string_view more) const {
  if (mode_ == Mode::Failed) return false;
  JsonConstraint c = *this;
  for (char ch : more)
    if (!c.step(static_cast<unsigned char>(ch))) return false;
  return true;
}

void JsonConstraint::advance(std::string_view more) {
  for (char ch : more)
    if (!step(static_cast<unsigned char>(ch))) {
      mode_ = Mode::Failed;
      return;
    }
}

bool JsonConstraint::push(bool object) {
  if (depth_ >= kMaxDepth) return false;
  uint64_t& w = stack_[depth_ / 64];
  const uint64_t bit = uint64_t{1} << (depth_ % 64);
  w = object ? (w | bit) : (w & ~bit);
  ++depth_;
  mode_ = object ? Mode::ObjFirst : Mode::ArrFirst;
  return true;
}

bool JsonConstraint::top_is_object() const {
  const int d = depth_ - 1;
  return (stack_[d / 64] >> (d % 64)) & 1u;
}

bool JsonConstraint::close(bool object) {
  if (depth_ == 0 || top_is_object() != object) return false;
  --depth_;
  value_done();
  return true;
}

bool JsonConstraint::value_start(unsigned char c) {
  switch (c) {
    case '{': return push(true);
    case '[': return push(false);
    case '"':
      mode_ = Mode::Str;
      key_ = false;
      return true;
    case '-': mode_ = Mode::NumMinus; return true;
    case '0': mode_ = Mode::NumZero; return true;
    case 't': case 'f': case 'n':
      mode_ = Mode::Literal;
      lit_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
      aux_ = 1;
      return true;
    default:
      if (c >= '1' && c <= '9') {
        mode_ = Mode::NumInt;
        return true;
      }
      return false;
  }
}

bool JsonConstraint::step(unsigned char c) {
  const bool in_string = mode_ >= Mode::Str && mode_ <= Mode::StrUtf8;
  if (!in_string) {  // limit whitespace runs
    if (is_ws(c)) {
      if (ws_run_ >= kMaxWhitespaceRun) return false;
      ++ws_run_;
    } else {
      ws_run_ = 0;
    }
  }
  return transition(c);
}

bool JsonConstraint::transition(unsigned char c) {
  switch (mode_) {
    case Mode::Start:
      if (is_ws(c)) return true;
      return c == '{' && push(true);
    case Mode::ObjFirst:
    case Mode::ObjKey:
      if (is_ws(c)) return true;
      if (c == '"') {
        mode_ = Mode::Str;
        key_ = true;
        return true;
      }
      return mode_ == Mode::ObjFirst && c == '}' && close(true);
    case Mode::Colon:
      if (is_ws(c)) return true;
      if (c != ':') return false;
      mode_ = Mode::Value;
      return true;
    case Mode::Value:
      return is_ws(c) || value_start(c);
    case Mode::ArrFirst:
      if (is_ws(c)) return true;
      if (c == ']') return close(false);
      return value_start(c);
    case Mode::AfterValue:
      if (is_ws(c)) return true;
      if (c == ',') {
        mode_ = top_is_object() ? Mode::ObjKey : Mode::Value;
        return true;
      }
      if (c == '}') return close(true);
      if (c == ']') return close(false);
      return false;
    case Mode::Str:
      if (c == '"') {
        if (key_) {
          mode_ = Mode::Colon;
        } else {
          value_done();
        }
        return true;
      }
      if (c == '\\') {
        mode_ = Mode::StrEsc;
        return true;
      }
      if (c < 0x20) return false;
      if (c < 0x80) return true;
      // UTF-8 lead byte: the sequence's length and the range of its second byte (no overlong forms, no
      // surrogates, nothing above U+10FFFF).
      lo_ = 0x80;
      hi_ = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) {
        aux_ = 1;
      } else if (c >= 0xE0 && c <= 0xEF) {
        aux_ = 2;
        if (c == 0xE0) lo_ = 0xA0;
        if (c == 0xED) hi_ = 0x9F;
      } else if (c >= 0xF0 && c <= 0xF4) {
        aux_ = 3;
        if (c == 0xF0) lo_ = 0x90;
        if (c == 0xF4) hi_ = 0x8F;
      } else {
        return false;
      }
      mode_ = Mode::StrUtf8;
      return true;
    case Mode::StrUtf8:
      if (c < lo_ || c > hi_) return false;
      lo_ = 0x80;
      hi_ = 0xBF;
      if (--aux_ == 0) mode_ = Mode::Str;
      return true;
    case Mode::StrEsc:
      switch (c) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          mode_ = Mode::Str;
          return true;
        case 'u':
          mode_ = Mode::StrHex;
          aux_ = 4;
          surr_ = Surrogate::None;
          return true;
        default:
          return false;
      }
    case Mode::StrHex: {
      if (!is_hex(c)) return false;
      const int pos = 4 - aux_;
      const bool d = c == 'd' || c == 'D';
      const bool c_to_f = (c >= 'c' && c <= 'f') || (c >= 'C' && c <= 'F');
      if (surr_ == Surrogate::Low) {
        if ((pos == 0 && !d) || (pos == 1 && !c_to_f)) return false;
      } else if (pos == 0) {
        surr_ = d ? Surrogate::FirstD : Surrogate::None;
      } else if (pos == 1 && surr_ == Surrogate::FirstD) {
        if (c_to_f) return false;  // a low surrogate without a high one before it
        surr_ = (c >= '8' && c <= '9') || (c >= 'a' && c <= 'b') || (c >= 'A' && c <= 'B') ? Surrogate::High
                                                                                          : Surrogate::None;
      }
      if (--aux_ == 0) mode_ = surr_ == Surrogate::High ? Mode::StrLowEsc : Mode::Str;
      return true;
    }
    case Mode::StrLowEsc:
      if (c != '\\') return false;
      mode_ = Mode::StrLowU;
      return true;
    case Mode::StrLowU:
      if (c != 'u') return false;
      mode_ = Mode::StrHex;
      aux_ = 4;
      surr_ = Surrogate::Low;
      return true;
    case Mode::NumMinus:
      if (c == '0') {
        mode_ = Mode::NumZero;
        return true;
      }
      if (c >= '1' && c <= '9') {
        mode_ = Mode::NumInt;
        return true;
      }
      return false;
    case Mode::NumInt:
      if (is_digit(c)) return true;
      [[fallthrough]];
    case Mode::NumZero:
      if (c == '.') {
        mode_ = Mode::NumDot;
        return true;
      }
      [[fallthrough]];
    case Mode::NumFrac:
      if (mode_ == Mode::NumFrac && is_digit(c)) return true;
      if (c == 'e' || c == 'E') {
        mode_ = Mode::NumExp;
        return true;
      }
      value_done();  // the number ends here; `c` belongs to the container
      return transition(c);
    case Mode::NumDot:
      if (!is_digit(c)) return false;
      mode_ = Mode::NumFrac;
      return true;
    case Mode::NumExp:
      if (c == '+' || c == '-') {
        mode_ = Mode::NumExpSign;
        return true;
      }
      [[fallthrough]];
    case Mode::NumExpSign:
      if (!is_digit(c)) return false;
      mode_ = Mode::NumExpDigits;
      return true;
    case Mode::NumExpDigits:
      if (is_digit(c)) return true;
      value_done();
      return transition(c);
    case Mode::Literal: {
      const std::string_view lit = kLiterals[lit_];
      if (c != static_cast<unsigned char>(lit[aux_])) return false;
      if (++aux_ == lit.size()) value_done();
      return true;
    }
    case Mode::Done:
      return is_ws(c);
    case Mode::Failed:
      return false;
  }
  return false;
}

int JsonConstraint::min_close_bytes() const {
  const int closers = depth_;
  const int after_string = key_ ? 2 : 0;  // a key still needs ':' and a value ("0")
  switch (mode_) {
    case Mode::Start: return 2;
    case Mode::Done: return 0;
    case Mode::Failed: return kUnreachable;
    case Mode::ObjFirst:
    case Mode::ArrFirst:
    case Mode::AfterValue:
    case Mode::NumZero:
    case Mode::NumInt:
    case Mode::NumFrac:
    case Mode::NumExpDigits: return closers;
    case Mode::ObjKey: return 4 + closers;  // "":0
    case Mode::Colon: return 2 + closers;   // :0
    case Mode::Value:
    case Mode::NumMinus:
    case Mode::NumDot:
    case Mode::NumExp:
    case Mode::NumExpSign: return 1 + closers;
    case Mode::Str: return 1 + after_string + closers;
    case Mode::StrEsc: return 2 + after_string + closers;
    case Mode::StrHex: return aux_ + (surr_ == Surrogate::High ? 6 : 0) + 1 + after_string + closers;
    case Mode::StrLowEsc: return 6 + 1 + after_string + closers;  // \uDC00"
    case Mode::StrLowU: return 5 + 1 + after_string + closers;
    case Mode::StrUtf8: return aux_ + 1 + after_string + closers;
    case Mode::Literal: return static_cast<int>(kLiterals[lit_].size()) - aux_ + closers;
  }
  return kUnreachable;
}

}  // namespace lily
