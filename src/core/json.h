// A small JSON reader and writer (RFC 8259) for file headers (safetensors),
// configuration and the CLI's --json output.
//
// parse() never crashes on hostile input: every read is bounds-checked,
// nesting is limited, and every problem is a kiln::Error that says what was
// wrong and at which byte offset.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::json {

class Value {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Value() = default;
  static Value null() { return Value(); }
  static Value boolean(bool b);
  static Value number(double v);
  static Value integer(int64_t v);
  static Value string(std::string s);
  static Value array(std::vector<Value> items = {});
  static Value object(std::vector<std::pair<std::string, Value>> members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  // "null", "boolean", "number", "string", "array", "object" (for messages)
  const char* kind_name() const;

  // Accessors throw kiln::Error when the kind differs.
  bool as_bool() const;
  double as_double() const;
  // Exact for integers written without fraction or exponent (any int64);
  // throws for fractions and out-of-range values.
  int64_t as_int64() const;
  const std::string& as_string() const;
  const std::vector<Value>& items() const;
  // Members in document order (duplicates kept: callers that care check).
  const std::vector<std::pair<std::string, Value>>& members() const;
  // First member called `key`, or nullptr (objects only).
  const Value* find(std::string_view key) const;

  // Builders for writers.
  Value& push_back(Value v);
  Value& set(std::string key, Value v);  // appends; does not replace

  // Compact JSON text (numbers in the shortest form that reads back exactly).
  std::string dump() const;

 private:
  friend class Parser;
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  double num_ = 0;
  std::string text_;  // string value, or a number's source text
  std::vector<Value> items_;
  std::vector<std::pair<std::string, Value>> members_;
};

// Parses one JSON document (surrounding whitespace allowed, nothing else).
// Errors read "JSON: <problem> at byte <offset>".
Value parse(std::string_view text, int max_depth = 256);

// A JSON string literal with quotes and escapes.
std::string quote(std::string_view s);
// The shortest decimal text that reads back as v ("0.1", "1e-05"); JSON has
// no NaN/Infinity, so those give "NaN"/"Infinity"/"-Infinity" as Python's json does.
std::string number_text(double v);

}  // namespace kiln::json
