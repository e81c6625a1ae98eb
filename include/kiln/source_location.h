// kiln::SourceLocation: where user code called into kiln (graph-break
// reports, fullgraph errors). std::source_location would do, but clang 14
// with libstdc++ 12 (the fuzz build's compiler here) lacks it; the builtins
// it rests on exist in both GCC and clang and, as default arguments, take
// the caller's position.
#pragma once

namespace kiln {

struct SourceLocation {
  static constexpr SourceLocation current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE(),
                                          const char* function = __builtin_FUNCTION()) noexcept {
    return SourceLocation{file, line, function};
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr const char* function_name() const noexcept { return function_; }

  const char* file_ = "";
  unsigned line_ = 0;
  const char* function_ = "";
};

}  // namespace kiln
