// kiln data import|get: puts CIFAR-10 into the data directory in the
// official binary layout, from an archive or from the official download.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/commands.h"
#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln::cli {

int run_data(int argc, char** argv) {
  const char* usage =
      "usage: kiln data import cifar10 ARCHIVE [--dir DIR]   (ARCHIVE: cifar-10-binary.tar.gz or an image-folder "
      ".tar.zst/.tar.gz)\n"
      "       kiln data get cifar10 [--dir DIR]              (downloads the official archive, checks its MD5)\n"
      "DIR defaults to $KILN_DATA, else ./data";
  KILN_CHECK(argc >= 3, "data: missing arguments\n", usage);
  std::string verb = argv[1], name = argv[2];
  KILN_CHECK(name == "cifar10", "data: unknown data set '", name, "'; kiln imports cifar10 (Fashion-MNIST comes from "
             "Debian's dataset-fashion-mnist package)\n", usage);
  const char* env = std::getenv("KILN_DATA");
  std::string dir = env && *env ? env : "data";
  std::string archive;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (verb == "import" && archive.empty() && a.rfind("--", 0) != 0) archive = a;
    else KILN_FAIL("data: unexpected argument '", a, "'\n", usage);
  }
  if (verb == "import") {
    KILN_CHECK(!archive.empty(), "data import: name the archive to import\n", usage);
    data::import_cifar10(archive, dir);
  } else if (verb == "get") {
    data::download_cifar10(dir);
  } else {
    KILN_FAIL("data: unknown action '", verb, "'\n", usage);
  }
  std::printf("CIFAR-10 is in %s/cifar-10-batches-bin\n", dir.c_str());
  return 0;
}

}  // namespace kiln::cli
