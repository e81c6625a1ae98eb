// The kiln command line (kiln::cli::parse_only from the kiln_cli library:
// CLI11 with kiln's validators), parsed and never run. Input: the arguments
// after the program name, separated by '\0' bytes ("train\0--epochs\01.9").
// A parse answers kExitOk or kExitUsage; anything else (an exception, a
// crash, a sanitizer report, another code) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words(1, "kiln");
  words.emplace_back();
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\0') words.emplace_back();
    else words.back() += static_cast<char>(data[i]);
  }
  if (size == 0) words.pop_back();  // no input: the program name alone
  std::vector<const char*> argv;
  argv.reserve(words.size() + 1);
  for (const std::string& w : words) argv.push_back(w.c_str());
  argv.push_back(nullptr);  // argv[argc] is null, as the C runtime passes it

  std::string message;
  const int rc = kiln::cli::parse_only(static_cast<int>(words.size()), argv.data(), &message);
  if (rc != kiln::cli::kExitOk && rc != kiln::cli::kExitUsage) {
    std::fprintf(stderr, "kiln cli fuzz: parse_only returned %d\n", rc);
    std::abort();
  }
  if (rc == kiln::cli::kExitUsage && message.empty()) {
    std::fprintf(stderr, "kiln cli fuzz: a usage error without a message\n");
    std::abort();
  }
  return 0;
}
