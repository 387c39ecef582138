// JSON Schema constrained output: a schema compiled into a graph of nodes (JsonSchema) and an incremental
// byte matcher over it (SchemaMatcher) with the interface of JsonConstraint (advance / failed / complete /
// min_close_bytes), so the same token gate (engine/json_reply.h) drives both.
//
// Supported keywords: type (one or a list), properties, required, additionalProperties (false, true or a
// schema), items, minItems, maxItems, enum, const, anyOf, $ref to "#", "#/$defs/NAME" or
// "#/definitions/NAME" (recursion allowed), and the annotations title, description, default, examples,
// $schema, $id, $comment, strict. Any other keyword is an error naming it (SchemaError), never ignored.
// A schema with no type (or `true`, `{}`) allows any JSON value; an object with properties but no
// additionalProperties also allows other keys (JSON Schema's default).
//
// The text it accepts is compact JSON: no whitespace outside strings (so constrained decoding cannot
// loop on whitespace, and every byte counts toward the value). Object keys come in any order, each at most
// once; a value's enum / const alternatives are matched as their compact JSON text. \u escapes of
// surrogates are refused (a strict parser rejects unpaired ones); integers have at most 18 digits and
// exponents at most 2, so every parser reads the number exactly (no overflow to infinity).
// A number at the top level counts as complete after its first digit (nothing marks its end).
//
// The matcher is nondeterministic where the grammar is (a number may end or go on, anyOf alternatives,
// which key is being written): it keeps every live parse (at most kMaxStates), each a stack of frames.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace lily {

struct SchemaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct SchemaNode {
  enum class Kind : uint8_t { Any, Object, Array, String, Number, Integer, Literals, AnyOf };  // boolean, null: Literals
  Kind kind = Kind::Any;
  struct Prop {
    std::string key;   // the key as compact JSON text, quotes included
    int node = 0;
  };
  std::vector<Prop> props;           // Object: declared properties (at most 64)
  uint64_t required = 0;             // Object: bit i = props[i] is required
  int additional = -1;               // Object: node of other keys' values; -1 = no other keys
  int items = -1;                    // Array: node of the items
  int min_items = 0, max_items = -1; // Array: -1 = no maximum
  std::vector<std::string> literals; // Literals: the allowed values as compact JSON text
  std::vector<int> alts;             // AnyOf: alternative nodes
  int min_len = 0;                   // fewest bytes of a value of this node
};

class JsonSchema {
 public:
  static constexpr int kInf = 1 << 28;
  // Throws SchemaError naming the problem (unsupported keyword, bad value, unsatisfiable schema).
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::json& schema);

  const SchemaNode& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  int root() const { return root_; }
  int any() const { return any_; }

 private:
  friend class SchemaCompiler;
  std::vector<SchemaNode> nodes_;
  int root_ = 0, any_ = 0;
};

class SchemaMatcher {
 public:
  static constexpr int kMaxStates = 32;
  static constexpr int kMaxDepth = 64;

  explicit SchemaMatcher(std::shared_ptr<const JsonSchema> schema);

  void advance(std::string_view more);  // an invalid byte leaves the matcher failed
  bool accepts(std::string_view more) const;
  bool failed() const { return states_.empty(); }
  bool complete() const;                // the whole value is written
  int min_close_bytes() const;          // fewest bytes to complete (0 when complete; large when failed)
  bool operator==(const SchemaMatcher& o) const { return s_ == o.s_ && states_ == o.states_; }

  struct Frame {       // one open value (or the root) in a parse
    int node = 0;      // SchemaNode index (for keys: the owning object's)
    uint8_t kind = 0;  // FrameKind (json_schema.cpp)
    uint8_t phase = 0;
    uint8_t aux = 0;   // string: bytes left in an escape / UTF-8 sequence
    uint8_t lo = 0, hi = 0;  // string: range of the next UTF-8 continuation byte
    int key = -1;      // object: the property being written (-1: another key); literal: which literal
    uint32_t pos = 0;  // literal: bytes matched
    uint64_t seen = 0; // object: properties written
    int count = 0;     // array: items written
    bool operator==(const Frame&) const = default;
  };
  using Stack = std::vector<Frame>;

 private:
  std::shared_ptr<const JsonSchema> s_;
  std::vector<Stack> states_;
};

}  // namespace lily
