// kiln's one family of exceptions.
//
// User errors (bad shapes, dtypes, devices, files, arguments) throw kiln::Error
// with a message naming the op, the shapes/dtypes involved and what to do.
// Broken internal invariants use KILN_ASSERT, which throws InternalError with
// the source location: those are kiln bugs, not user mistakes.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A kiln bug: an invariant that user input cannot break was broken.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace kiln

// KILN_CHECK(cond, parts...): throw kiln::Error(parts...) when cond is false.
#define KILN_CHECK(cond, ...)                                        \
  do {                                                               \
    if (!(cond)) throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__)); \
  } while (0)

#define KILN_FAIL(...) throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__))

// KILN_ASSERT(cond, parts...): an internal invariant.
#define KILN_ASSERT(cond, ...)                                                  \
  do {                                                                          \
    if (!(cond))                                                                \
      throw ::kiln::InternalError(::kiln::detail::concat(                       \
          "internal error at ", __FILE__, ":", __LINE__, ": ", #cond, " ", ##__VA_ARGS__)); \
  } while (0)
