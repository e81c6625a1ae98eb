// Setting (or, with nullptr, unsetting) an environment variable for one
// scope in tests (KILN_DUMP, KILN_DATA, KILN_CACHE_DIR...): the old value, or
// its absence, comes back at the end. The one definition for every test
// binary: two classes of this name in one binary (there were: the C++ JIT
// tests had their own) break the one-definition rule, and the linker's pick
// of one inline destructor for both corrupted the heap when test_compiler
// ran as a single process.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace kiln::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }
  void set(const char* value) { value ? (void)::setenv(name_, value, 1) : (void)::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace kiln::testing
