// kiln::json: the reader used for safetensors headers (and the CLI's --json).
#include <gtest/gtest.h>

#include <random>

#include "core/json.h"
#include "kiln/kiln.h"
#include "testing/errors.h"

namespace kiln {
namespace {

TEST(Json, ParsesEveryKind) {
  json::Value v = json::parse(R"( {"a": [1, -2.5e3, true, false, null], "s": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00",
                                  "big": 9007199254740993, "o": {}} )");
  ASSERT_TRUE(v.is_object());
  const auto& a = v.find("a")->items();
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[0].as_int64(), 1);
  EXPECT_DOUBLE_EQ(a[1].as_double(), -2500.0);
  EXPECT_TRUE(a[2].as_bool());
  EXPECT_FALSE(a[3].as_bool());
  EXPECT_TRUE(a[4].is_null());
  EXPECT_EQ(v.find("s")->as_string(), "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("big")->as_int64(), 9007199254740993LL);  // exact beyond 2^53
  EXPECT_TRUE(v.find("o")->members().empty());
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, DumpRoundTrips) {
  json::Value v = json::Value::object();
  v.set("k\n", json::Value::array({json::Value::integer(-3), json::Value::number(0.1), json::Value::number(1e-5),
                                   json::Value::string("\x01q"), json::Value::boolean(true), json::Value()}));
  std::string text = v.dump();
  EXPECT_EQ(text, R"({"k\n":[-3,0.1,1e-05,"\u0001q",true,null]})");
  EXPECT_EQ(json::parse(text).dump(), text);
}

TEST(Json, ErrorsNameTheProblemAndOffset) {
  EXPECT_KILN_ERROR(json::parse(""), "unexpected end", "byte 0");
  EXPECT_KILN_ERROR(json::parse("{\"a\":1,}"), "expected a string key", "byte 7");
  EXPECT_KILN_ERROR(json::parse("[1 2]"), "expected ',' or ']'");
  EXPECT_KILN_ERROR(json::parse("{\"a\" 1}"), "expected ':'");
  EXPECT_KILN_ERROR(json::parse("\"abc"), "unterminated string");
  EXPECT_KILN_ERROR(json::parse("\"a\nb\""), "control character");
  EXPECT_KILN_ERROR(json::parse("\"\\x\""), "unknown escape");
  EXPECT_KILN_ERROR(json::parse("\"\\ud800\""), "surrogate");
  EXPECT_KILN_ERROR(json::parse("01"), "after the JSON value");
  EXPECT_KILN_ERROR(json::parse("-"), "digits");
  EXPECT_KILN_ERROR(json::parse("1.e5"), "digits after the decimal point");
  EXPECT_KILN_ERROR(json::parse("tru"), "expected a value");
  EXPECT_KILN_ERROR(json::parse("{} x"), "after the JSON value");
  EXPECT_KILN_ERROR(json::parse(std::string(100000, '[')), "nesting deeper");
  EXPECT_KILN_ERROR(json::parse("1.5").as_int64(), "expected an integer");
  EXPECT_KILN_ERROR(json::parse("99999999999999999999").as_int64(), "64 bits");
  EXPECT_KILN_ERROR(json::parse("[]").as_string(), "expected a string, got array");
}

TEST(Json, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  const std::string base = R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"a":"b"}})";
  for (int i = 0; i < 20000; ++i) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = static_cast<char>(rng()); break;
        case 1: s.erase(at, 1 + rng() % 5); break;
        default: s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), "{}[],:\"\\0e-"[rng() % 11]);
      }
      if (s.empty()) s.push_back('x');
    }
    try {
      json::parse(s);
    } catch (const InternalError& e) {
      FAIL() << "internal error on " << s << ": " << e.what();
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace kiln
