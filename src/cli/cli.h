// The `kiln` command line as a library (target kiln_cli), so that main() and
// the libFuzzer target fuzz/cli_fuzz.cpp share one parser.
#pragma once
#include <string>

namespace kiln::cli {

// Exit codes of the kiln program.
constexpr int kExitOk = 0;
constexpr int kExitError = 1;  // a kiln::Error: bad file, data, or combination found at run time
constexpr int kExitUsage = 2;  // the command line itself is wrong (CLI11's message + a pointer to --help)

// Parses argv (argv[0] is the program name) and runs the command: what main() does.
int run(int argc, const char* const* argv);

// Builds the whole command line and parses argv without running anything,
// printing nothing, touching no file: kExitOk when it parses (or asks for
// --help), kExitUsage when it does not, with CLI11's message in *message.
int parse_only(int argc, const char* const* argv, std::string* message = nullptr);

}  // namespace kiln::cli
