// The kiln program: `kiln <command> [args]` (src/cli/app.cpp has the command line).
#include "cli/cli.h"

int main(int argc, char** argv) { return kiln::cli::run(argc, argv); }
