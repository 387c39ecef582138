// Python semantics of the operators, attribute/item access, slicing and iteration on Values. Functions throw
// lily::Error with a Python-like message (the evaluator adds the template position).
#pragma once
#include <string>

#include "chat/jinja/value.h"

namespace lily::jinja {

constexpr size_t kMaxSequence = 1u << 22;  // longest list/string an operation may build (guards 'x' * 10**12)

Value binary_op(const std::string& op, const Value& a, const Value& b);  // + - * / // % ** ~
Value unary_minus(const Value& a);
bool contains(const Value& container, const Value& item);  // Python `item in container`

// obj.name: bound methods for str/dict/list (see methods.cpp), then dict keys; Undefined when missing.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: dict key / sequence index / string index, then attribute; Undefined when missing.
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The items a for loop visits: list/tuple elements, dict keys, string characters, nothing for Undefined.
List iterate(const Value& v);
// Bound method `name` of a str/dict/list/tuple value, or Undefined if there is none (methods.cpp).
Value bound_method(const Value& self, const std::string& name);
// Python str.join etc. need the Value as text: raises for undefined in strict spots.
int64_t to_index(const Value& v, const char* what);
// Throws the Undefined's error when v is undefined (jinja2's strict uses: arithmetic, attributes, calls).
void require_defined(const Value& v);

}  // namespace lily::jinja
