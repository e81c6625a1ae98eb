// Checks that a statement fails with a user error (kiln::Error) whose message
// says what it should.
#pragma once
#include <exception>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

#include "kiln/error.h"

namespace kiln::testing {

// f throws kiln::Error (not InternalError: that is a kiln bug or an op with
// no definition yet); on success `msg` holds its message.
template <typename F>
::testing::AssertionResult throws_user_error(F&& f, std::string& msg) {
  try {
    f();
  } catch (const InternalError& e) {
    return ::testing::AssertionFailure() << "threw InternalError instead of a user error: " << e.what();
  } catch (const Error& e) {
    msg = e.what();
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kiln exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// f throws a user error whose message holds every part.
template <typename F>
::testing::AssertionResult error_says(F&& f, std::initializer_list<const char*> parts) {
  std::string msg;
  if (::testing::AssertionResult r = throws_user_error(f, msg); !r) return r;
  for (const char* p : parts)
    if (msg.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing

// EXPECT_KILN_ERROR_WITH(check, stmt, parts...): stmt throws kiln::Error and
// check(callable, {parts...}) accepts it.
#define EXPECT_KILN_ERROR_WITH(check, stmt, ...)                     \
  do {                                                               \
    EXPECT_THROW((void)(stmt), ::kiln::Error);                       \
    EXPECT_TRUE(check([&] { (void)(stmt); }, {__VA_ARGS__})) << #stmt; \
  } while (0)
#define EXPECT_KILN_ERROR(stmt, ...) EXPECT_KILN_ERROR_WITH(::kiln::testing::error_says, stmt, __VA_ARGS__)
