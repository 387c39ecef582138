// SchemaMatcher: the byte-level parse of compact JSON against a compiled schema (json_schema.h).
#include "engine/json_schema.h"

#include <algorithm>

namespace lily {

using Kind = SchemaNode::Kind;
using Frame = SchemaMatcher::Frame;
using Stack = SchemaMatcher::Stack;

namespace {

enum FrameKind : uint8_t { F_ROOT, F_OBJ, F_ARR, F_STR, F_KEYSTR, F_NUM, F_LIT, F_KEYLIT };
enum RootPhase : uint8_t { R_START, R_IN, R_DONE };
enum ObjPhase : uint8_t { O_FIRST, O_KEY, O_IN_KEY, O_COLON, O_VALUE, O_IN_VALUE, O_AFTER };
enum ArrPhase : uint8_t { A_FIRST, A_VALUE, A_IN, A_AFTER };
enum StrPhase : uint8_t { S_BODY, S_ESC, S_HEX, S_UTF8 };
enum NumPhase : uint8_t { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_EXP, N_EXPSIGN, N_EXPDIG };

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
int hex_val(unsigned char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
int sat_add(int a, int b) { return std::min(JsonSchema::kInf, a + b); }

class Stepper {
 public:
  Stepper(const JsonSchema& s, std::vector<Stack>& out) : s_(s), out_(out) {}

  void step(Stack st, unsigned char c) {
    Frame& f = st.back();
    switch (f.kind) {
      case F_ROOT:
        if (f.phase == R_START) {
          f.phase = R_IN;
          value_start(std::move(st), s_.root(), c);
        }
        return;
      case F_OBJ: return object(std::move(st), c);
      case F_ARR: return array(std::move(st), c);
      case F_STR: case F_KEYSTR: return string(std::move(st), c);
      case F_NUM: return number(std::move(st), c);
      default: return literal(std::move(st), c);
    }
  }

 private:
  const SchemaNode& node(int i) const { return s_.node(i); }
  void emit(Stack st) {
    if (out_.size() < static_cast<size_t>(SchemaMatcher::kMaxStates)) out_.push_back(std::move(st));
  }

  // The top frame's value (or key) is complete: pop it and move its parent on.
  static void done(Stack& st) {
    const uint8_t kind = st.back().kind;
    const int key = st.back().key;
    st.pop_back();
    Frame& p = st.back();
    if (p.kind == F_ROOT) {
      p.phase = R_DONE;
    } else if (p.kind == F_ARR) {
      p.phase = A_AFTER;
    } else if (kind == F_KEYLIT) {
      p.seen |= uint64_t{1} << key;
      p.key = key;
      p.phase = O_COLON;
    } else if (kind == F_KEYSTR) {
      p.key = -1;
      p.phase = O_COLON;
    } else {
      p.phase = O_AFTER;
    }
  }

  void push(Stack st, Frame f) {
    if (st.size() >= static_cast<size_t>(SchemaMatcher::kMaxDepth)) return;
    st.push_back(f);
    emit(std::move(st));
  }

  void value_start(Stack st, int n, unsigned char c) {
    const SchemaNode& nd = node(n);
    Frame f;
    f.node = n;
    switch (nd.kind) {
      case Kind::AnyOf:
        for (int a : nd.alts) value_start(st, a, c);
        return;
      case Kind::Literals:
        literals_start(std::move(st), n, c);
        return;
      case Kind::Object:
        if (c == '{') f.kind = F_OBJ, f.phase = O_FIRST, push(std::move(st), f);
        return;
      case Kind::Array:
        if (c == '[') f.kind = F_ARR, f.phase = A_FIRST, push(std::move(st), f);
        return;
      case Kind::String:
        if (c == '"') f.kind = F_STR, f.phase = S_BODY, push(std::move(st), f);
        return;
      case Kind::Number: case Kind::Integer:
        number_start(std::move(st), f, c);
        return;
      case Kind::Any:
        if (c == '{') f.kind = F_OBJ, f.phase = O_FIRST, push(st, f);
        else if (c == '[') f.kind = F_ARR, f.phase = A_FIRST, push(st, f);
        else if (c == '"') f.kind = F_STR, f.phase = S_BODY, push(st, f);
        else if (c == '-' || is_digit(c)) number_start(st, f, c);
        else literals_start(std::move(st), n, c);
        return;
    }
  }

  void number_start(Stack st, Frame f, unsigned char c) {
    f.kind = F_NUM;
    if (c == '-') f.phase = N_MINUS;
    else if (c == '0') f.phase = N_ZERO;
    else if (is_digit(c)) f.phase = N_INT;
    else return;
    push(std::move(st), f);
  }

  void literals_start(Stack st, int n, unsigned char c) {
    const auto& lits = node(n).literals;
    for (size_t i = 0; i < lits.size(); ++i) {
      if (lits[i].empty() || static_cast<unsigned char>(lits[i][0]) != c) continue;
      Stack s2 = st;
      if (s2.size() >= static_cast<size_t>(SchemaMatcher::kMaxDepth)) return;
      Frame f;
      f.kind = F_LIT;
      f.node = n;
      f.key = static_cast<int>(i);
      f.pos = 1;
      s2.push_back(f);
      if (lits[i].size() == 1) done(s2);
      emit(std::move(s2));
    }
  }

  // Object of node n (or Any: no declared keys, any other key).
  void object(Stack st, unsigned char c) {
    Frame& f = st.back();
    const SchemaNode& nd = node(f.node);
    const bool any = nd.kind == Kind::Any;
    const int additional = any ? s_.any() : nd.additional;
    const uint64_t required = any ? 0 : nd.required;
    switch (f.phase) {
      case O_FIRST: case O_KEY:
        if (c == '}' && f.phase == O_FIRST && (required & ~f.seen) == 0) {
          done(st);
          emit(std::move(st));
        } else if (c == '"') {
          f.phase = O_IN_KEY;
          if (!any)
            for (size_t i = 0; i < nd.props.size(); ++i) {
              if (f.seen >> i & 1u) continue;
              Stack s2 = st;
              s2.back().key = static_cast<int>(i);
              Frame k;
              k.kind = F_KEYLIT;
              k.node = s2.back().node;
              k.key = static_cast<int>(i);
              k.pos = 1;
              push(std::move(s2), k);
            }
          if (additional >= 0) {
            f.key = -1;
            Frame k;
            k.kind = F_KEYSTR;
            k.phase = S_BODY;
            push(std::move(st), k);
          }
        }
        return;
      case O_COLON:
        if (c == ':') f.phase = O_VALUE, emit(std::move(st));
        return;
      case O_VALUE: {
        const int child = f.key >= 0 ? nd.props[static_cast<size_t>(f.key)].node : additional;
        f.phase = O_IN_VALUE;
        value_start(std::move(st), child, c);
        return;
      }
      case O_AFTER: {
        if (c == '}' && (required & ~f.seen) == 0) {
          done(st);
          emit(std::move(st));
        } else if (c == ',') {
          bool more = additional >= 0;
          for (size_t i = 0; i < nd.props.size() && !more; ++i) more = !(f.seen >> i & 1u);
          if (more) f.phase = O_KEY, emit(std::move(st));
        }
        return;
      }
      default: return;
    }
  }

  void array(Stack st, unsigned char c) {
    Frame& f = st.back();
    const SchemaNode& nd = node(f.node);
    const bool any = nd.kind == Kind::Any;
    const int items = any ? s_.any() : nd.items;
    const int min_items = any ? 0 : nd.min_items, max_items = any ? -1 : nd.max_items;
    switch (f.phase) {
      case A_FIRST: case A_VALUE:
        if (c == ']' && f.phase == A_FIRST) {
          if (min_items == 0) done(st), emit(std::move(st));
          return;
        }
        if (f.phase == A_FIRST && max_items == 0) return;
        f.count++;
        f.phase = A_IN;
        value_start(std::move(st), items, c);
        return;
      case A_AFTER:
        if (c == ']' && f.count >= min_items) done(st), emit(std::move(st));
        else if (c == ',' && (max_items < 0 || f.count < max_items)) f.phase = A_VALUE, emit(std::move(st));
        return;
      default: return;
    }
  }

  void string(Stack st, unsigned char c) {
    Frame& f = st.back();
    switch (f.phase) {
      case S_BODY:
        if (c == '"') {
          done(st);
        } else if (c == '\\') {
          f.phase = S_ESC;
        } else if (c < 0x20) {
          return;
        } else if (c >= 0x80) {  // a UTF-8 lead byte: how many continuation bytes, and the first one's range
          f.phase = S_UTF8;
          f.lo = 0x80, f.hi = 0xBF;
          if (c >= 0xC2 && c <= 0xDF) f.aux = 1;
          else if (c == 0xE0) f.aux = 2, f.lo = 0xA0;
          else if (c == 0xED) f.aux = 2, f.hi = 0x9F;
          else if (c >= 0xE1 && c <= 0xEF) f.aux = 2;
          else if (c == 0xF0) f.aux = 3, f.lo = 0x90;
          else if (c >= 0xF1 && c <= 0xF3) f.aux = 3;
          else if (c == 0xF4) f.aux = 3, f.hi = 0x8F;
          else return;
        }
        emit(std::move(st));
        return;
      case S_UTF8:
        if (c < f.lo || c > f.hi) return;
        f.lo = 0x80, f.hi = 0xBF;
        if (--f.aux == 0) f.phase = S_BODY;
        emit(std::move(st));
        return;
      case S_ESC:
        if (c == 'u') {
          f.phase = S_HEX, f.aux = 4, f.pos = 0;
        } else if (std::string_view("\"\\/bfnrt").find(static_cast<char>(c)) != std::string_view::npos) {
          f.phase = S_BODY;
        } else {
          return;
        }
        emit(std::move(st));
        return;
      case S_HEX: {
        const int v = hex_val(c);
        if (v < 0) return;
        f.pos = f.pos * 16 + static_cast<uint32_t>(v);
        if (--f.aux == 2 && (f.pos & 0xF8u) == 0xD8u) return;  // a surrogate half
        if (f.aux == 0) f.phase = S_BODY;
        emit(std::move(st));
        return;
      }
      default: return;
    }
  }

  void number(Stack st, unsigned char c) {
    Frame& f = st.back();
    const bool integer = node(f.node).kind == Kind::Integer;
    const uint8_t ph = f.phase;
    if (ph == N_ZERO || ph == N_INT || ph == N_FRAC || ph == N_EXPDIG) {  // the number may end here
      Stack ended = st;
      done(ended);
      step(std::move(ended), c);
    }
    uint8_t next = 255;
    const bool digit = is_digit(c);
    switch (ph) {
      case N_MINUS: next = c == '0' ? N_ZERO : digit ? N_INT : 255; break;
      case N_ZERO: case N_INT:
        if (ph == N_INT && digit) next = N_INT;
        else if (c == '.' && !integer) next = N_DOT;
        else if ((c == 'e' || c == 'E') && !integer) next = N_EXP;
        break;
      case N_DOT: if (digit) next = N_FRAC; break;
      case N_FRAC:
        if (digit) next = N_FRAC;
        else if (c == 'e' || c == 'E') next = N_EXP;
        break;
      case N_EXP: next = (c == '+' || c == '-') ? N_EXPSIGN : digit ? N_EXPDIG : 255; break;
      case N_EXPSIGN: case N_EXPDIG: if (digit) next = N_EXPDIG; break;
      default: break;
    }
    if (next == 255) return;
    // Digits that keep every parser exact: an integer fits int64 (18 digits), an exponent has at most 2.
    f.pos = next == ph ? f.pos + 1 : 1;
    if ((next == N_INT && integer && f.pos > 18) || (next == N_EXPDIG && ph == N_EXPDIG && f.pos > 2)) return;
    f.phase = next;
    emit(std::move(st));
  }

  void literal(Stack st, unsigned char c) {
    Frame& f = st.back();
    const std::string& text = f.kind == F_LIT ? node(f.node).literals[static_cast<size_t>(f.key)]
                                              : node(f.node).props[static_cast<size_t>(f.key)].key;
    if (f.pos >= text.size() || static_cast<unsigned char>(text[f.pos]) != c) return;
    if (++f.pos == text.size()) done(st);
    emit(std::move(st));
  }

  const JsonSchema& s_;
  std::vector<Stack>& out_;
};

// Bytes the required, unwritten properties of an object still need (each with its comma), `skip` excepted.
int required_cost(const JsonSchema& s, const SchemaNode& nd, uint64_t seen, int skip) {
  int cost = 0;
  for (size_t i = 0; i < nd.props.size(); ++i)
    if ((nd.required >> i & 1u) && !(seen >> i & 1u) && static_cast<int>(i) != skip)
      cost = sat_add(cost, 1 + static_cast<int>(nd.props[i].key.size()) + 1 + s.node(nd.props[i].node).min_len);
  return cost;
}

int frame_cost(const JsonSchema& s, const Frame& f) {
  const SchemaNode& nd = s.node(f.node);
  switch (f.kind) {
    case F_ROOT: return f.phase == R_START ? s.node(s.root()).min_len : 0;
    case F_STR: case F_KEYSTR:
      return f.phase == S_BODY ? 1 : f.phase == S_ESC ? 2 : f.aux + 1;
    case F_NUM:
      return (f.phase == N_MINUS || f.phase == N_DOT || f.phase == N_EXP || f.phase == N_EXPSIGN) ? 1 : 0;
    case F_LIT: return static_cast<int>(nd.literals[static_cast<size_t>(f.key)].size() - f.pos);
    case F_KEYLIT: return static_cast<int>(nd.props[static_cast<size_t>(f.key)].key.size() - f.pos);
    case F_ARR: {
      const bool any = nd.kind == Kind::Any;
      const int m = any ? 0 : nd.min_items;
      const int len = s.node(any ? s.any() : nd.items).min_len;
      auto rest = [&](int n) {
        int c = 1;
        for (int i = 0; i < n; ++i) c = sat_add(c, 1 + len);
        return c;
      };
      if (f.phase == A_FIRST) return m > 0 ? sat_add(rest(m - 1), len) : 1;
      if (f.phase == A_VALUE) return sat_add(len, rest(std::max(0, m - f.count - 1)));
      return rest(std::max(0, m - f.count));
    }
    case F_OBJ: {
      if (nd.kind == Kind::Any) {
        if (f.phase == O_KEY) return 2 + 1 + 1 + 1;
        if (f.phase == O_IN_KEY || f.phase == O_COLON) return 1 + 1 + 1;
        if (f.phase == O_VALUE) return 1 + 1;
        return 1;
      }
      const int additional = nd.additional;
      auto child_len = [&](int key) {
        return s.node(key >= 0 ? nd.props[static_cast<size_t>(key)].node : additional).min_len;
      };
      switch (f.phase) {
        case O_FIRST: {
          const int r = required_cost(s, nd, f.seen, -1);
          return r > 0 ? sat_add(r, -1 + 1) : 1;
        }
        case O_KEY: {
          const int r = required_cost(s, nd, f.seen, -1);
          if (r > 0) return r;  // -1 (no comma before the first) + 1 ('}')
          int best = JsonSchema::kInf;
          for (size_t i = 0; i < nd.props.size(); ++i)
            if (!(f.seen >> i & 1u))
              best = std::min(best, sat_add(static_cast<int>(nd.props[i].key.size()) + 1, s.node(nd.props[i].node).min_len));
          if (additional >= 0) best = std::min(best, sat_add(3, s.node(additional).min_len));
          return sat_add(best, 1);
        }
        case O_IN_KEY: case O_COLON:
          return sat_add(sat_add(1, child_len(f.key)), sat_add(required_cost(s, nd, f.seen, f.key), 1));
        case O_VALUE: return sat_add(child_len(f.key), sat_add(required_cost(s, nd, f.seen, f.key), 1));
        default: return sat_add(required_cost(s, nd, f.seen, f.key), 1);  // O_IN_VALUE, O_AFTER
      }
    }
    default: return 0;
  }
}

}  // namespace

SchemaMatcher::SchemaMatcher(std::shared_ptr<const JsonSchema> schema) : s_(std::move(schema)) {
  Frame root;
  root.kind = F_ROOT;
  root.phase = R_START;
  states_.push_back({root});
}

void SchemaMatcher::advance(std::string_view more) {
  for (char ch : more) {
    if (states_.empty()) return;
    std::vector<Stack> next;
    Stepper st(*s_, next);
    for (auto& s : states_) st.step(std::move(s), static_cast<unsigned char>(ch));
    states_ = std::move(next);
  }
}

bool SchemaMatcher::accepts(std::string_view more) const {
  SchemaMatcher m = *this;
  m.advance(more);
  return !m.failed();
}

bool SchemaMatcher::complete() const { return !states_.empty() && min_close_bytes() == 0; }

int SchemaMatcher::min_close_bytes() const {
  int best = JsonSchema::kInf;
  for (const auto& st : states_) {
    int c = 0;
    for (const auto& f : st) c = sat_add(c, frame_cost(*s_, f));
    best = std::min(best, c);
  }
  return best;
}

}  // namespace lily
