// The kiln program: `kiln <command> [args]`.
#include <cstring>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "kiln/error.h"

namespace {

void usage(std::ostream& os) {
  os << "usage: kiln <command> [args]\n"
        "commands:\n"
        "  demo                      train the tutorial CNN on CIFAR-10 for 2 epochs: accuracy, images/s\n"
        "  train --model M --data D  train a zoo model (tutorial|resnet18|airbench) on cifar10|fashion-mnist\n"
        "  data import cifar10 FILE  write CIFAR-10 from an archive into $KILN_DATA (default ./data)\n"
        "  data get cifar10          download the official CIFAR-10 archive and import it\n"
        "  bench ops [--json]        time the op cases that bench/vs_torch.sh compares with PyTorch\n"
        "  help                      this text\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0) {
    usage(std::cout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "demo") return kiln::cli::run_demo(argc - 1, argv + 1);
    if (cmd == "train") return kiln::cli::run_train(argc - 1, argv + 1);
    if (cmd == "data") return kiln::cli::run_data(argc - 1, argv + 1);
    if (cmd == "bench") {
      if (argc >= 3 && std::strcmp(argv[2], "ops") == 0) return kiln::cli::run_bench_ops(argc - 2, argv + 2);
      std::cerr << "kiln bench: unknown suite" << (argc >= 3 ? std::string(" '") + argv[2] + "'" : "")
                << "; available: ops\n";
      return 2;
    }
  } catch (const kiln::Error& e) {
    std::cerr << "kiln " << e.what() << "\n";
    return 1;
  }
  std::cerr << "kiln: unknown command '" << cmd << "'\n";
  usage(std::cerr);
  return 2;
}
