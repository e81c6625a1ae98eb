#include "core/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kiln/error.h"

namespace kiln::json {

// ---- Value ----
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.bool_ = b;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::Number;
  v.num_ = d;
  v.text_ = number_text(d);
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Number;
  v.num_ = static_cast<double>(i);
  v.text_ = std::to_string(i);
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.text_ = std::move(s);
  return v;
}
Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::Array;
  v.items_ = std::move(items);
  return v;
}
Value Value::object(std::vector<std::pair<std::string, Value>> members) {
  Value v;
  v.kind_ = Kind::Object;
  v.members_ = std::move(members);
  return v;
}

const char* Value::kind_name() const {
  switch (kind_) {
    case Kind::Null: return "null";
    case Kind::Bool: return "boolean";
    case Kind::Number: return "number";
    case Kind::String: return "string";
    case Kind::Array: return "array";
    case Kind::Object: return "object";
  }
  return "?";
}

namespace {
void expect_kind(const Value& v, Value::Kind k, const char* want) {
  KILN_CHECK(v.kind() == k, "JSON: expected a ", want, ", got ", v.kind_name());
}
}  // namespace

bool Value::as_bool() const {
  expect_kind(*this, Kind::Bool, "boolean");
  return bool_;
}
double Value::as_double() const {
  expect_kind(*this, Kind::Number, "number");
  return num_;
}
int64_t Value::as_int64() const {
  expect_kind(*this, Kind::Number, "number");
  int64_t out = 0;
  const char* b = text_.data();
  const char* e = b + text_.size();
  auto [p, ec] = std::from_chars(b, e, out);
  KILN_CHECK(ec != std::errc::result_out_of_range, "JSON: integer ", text_, " does not fit in 64 bits");
  KILN_CHECK(ec == std::errc() && p == e, "JSON: expected an integer, got ", text_);
  return out;
}
const std::string& Value::as_string() const {
  expect_kind(*this, Kind::String, "string");
  return text_;
}
const std::vector<Value>& Value::items() const {
  expect_kind(*this, Kind::Array, "array");
  return items_;
}
const std::vector<std::pair<std::string, Value>>& Value::members() const {
  expect_kind(*this, Kind::Object, "object");
  return members_;
}
const Value* Value::find(std::string_view key) const {
  expect_kind(*this, Kind::Object, "object");
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}
Value& Value::push_back(Value v) {
  expect_kind(*this, Kind::Array, "array");
  items_.push_back(std::move(v));
  return *this;
}
Value& Value::set(std::string key, Value v) {
  expect_kind(*this, Kind::Object, "object");
  members_.emplace_back(std::move(key), std::move(v));
  return *this;
}

std::string Value::dump() const {
  switch (kind_) {
    case Kind::Null: return "null";
    case Kind::Bool: return bool_ ? "true" : "false";
    case Kind::Number: return text_;
    case Kind::String: return quote(text_);
    case Kind::Array: {
      std::string s = "[";
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) s += ",";
        s += items_[i].dump();
      }
      return s + "]";
    }
    case Kind::Object: {
      std::string s = "{";
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i) s += ",";
        s += quote(members_[i].first);
        s += ":";
        s += members_[i].second.dump();
      }
      return s + "}";
    }
  }
  return "null";
}

// ---- text helpers ----
std::string quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string number_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// ---- parser ----
class Parser {
 public:
  Parser(std::string_view t, int max_depth) : t_(t), max_depth_(max_depth) {}

  Value document() {
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (pos_ != t_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    KILN_FAIL("JSON: ", what, " at byte ", pos_);
  }
  bool at_end() const { return pos_ >= t_.size(); }
  char peek() const { return at_end() ? '\0' : t_[pos_]; }
  void skip_ws() {
    while (!at_end() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    if (at_end()) fail(std::string("unexpected end of text, expected '") + c + "'");
    if (t_[pos_] != c) fail(std::string("expected '") + c + "', found " + describe_here());
    ++pos_;
  }
  std::string describe_here() const {
    if (at_end()) return "the end of the text";
    unsigned char c = static_cast<unsigned char>(t_[pos_]);
    if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
    return buf;
  }
  bool literal(std::string_view word) {
    if (t_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > max_depth_) fail("nesting deeper than " + std::to_string(max_depth_) + " levels");
    if (at_end()) fail("unexpected end of text, expected a value");
    char c = t_[pos_];
    switch (c) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return Value::string(string());
      case 't':
        if (literal("true")) return Value::boolean(true);
        break;
      case 'f':
        if (literal("false")) return Value::boolean(false);
        break;
      case 'n':
        if (literal("null")) return Value::null();
        break;
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return number();
    }
    fail("expected a value, found " + describe_here());
  }

  Value object(int depth) {
    expect('{');
    Value v = Value::object();
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_ws();
      if (peek() != '"') fail("expected a string key, found " + describe_here());
      std::string key = string();
      skip_ws();
      expect(':');
      skip_ws();
      v.members_.emplace_back(std::move(key), value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      fail("expected ',' or '}' in an object, found " + describe_here());
    }
  }

  Value array(int depth) {
    expect('[');
    Value v = Value::array();
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_ws();
      v.items_.push_back(value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      fail("expected ',' or ']' in an array, found " + describe_here());
    }
  }

  Value number() {
    size_t start = pos_;
    auto digits = [&] {
      size_t s = pos_;
      while (!at_end() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
      return pos_ - s;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      fail("expected digits in a number");
    }
    if (peek() == '.') {
      ++pos_;
      if (digits() == 0) fail("expected digits after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("expected digits in the exponent");
    }
    Value v;
    v.kind_ = Value::Kind::Number;
    v.text_ = std::string(t_.substr(start, pos_ - start));
    v.num_ = std::strtod(v.text_.c_str(), nullptr);  // overflow gives +-inf, as Python's json
    return v;
  }

  uint32_t hex4() {
    if (t_.size() - pos_ < 4) fail("truncated \\u escape");
    uint32_t u = 0;
    for (int i = 0; i < 4; ++i) {
      char c = t_[pos_++];
      u <<= 4;
      if (c >= '0' && c <= '9') u |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') u |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') u |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad hex digit in a \\u escape");
    }
    return u;
  }

  static void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string s;
    for (;;) {
      if (at_end()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(t_[pos_]);
      if (c == '"') {
        ++pos_;
        return s;
      }
      if (c < 0x20) fail("control character in a string (escape it)");
      if (c != '\\') {
        s += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated escape in a string");
      char e = t_[pos_++];
      switch (e) {
        case '"': s += '"'; break;
        case '\\': s += '\\'; break;
        case '/': s += '/'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (t_.substr(pos_, 2) != "\\u") fail("unpaired UTF-16 surrogate in a \\u escape");
            pos_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("bad low UTF-16 surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired UTF-16 surrogate in a \\u escape");
          }
          append_utf8(s, cp);
          break;
        }
        default:
          --pos_;
          fail("unknown escape \\" + describe_here());
      }
    }
  }

  std::string_view t_;
  size_t pos_ = 0;
  int max_depth_;
};

Value parse(std::string_view text, int max_depth) { return Parser(text, max_depth).document(); }

}  // namespace kiln::json
