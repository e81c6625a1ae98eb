// kiln data import|get: puts CIFAR-10 into the data directory in the
// official binary layout, from an archive, an image-folder directory, or the
// official download.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/commands.h"
#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

std::string data_dir(const DataOptions& o) {
  if (!o.dir.empty()) return o.dir;
  const char* env = std::getenv("KILN_DATA");
  return env && *env ? env : "data";
}

int done(const std::string& dir) {
  std::printf("CIFAR-10 is in %s/cifar-10-batches-bin\n", dir.c_str());
  return 0;
}

}  // namespace

int run_data_import(const DataOptions& o) {
  const std::string dir = data_dir(o);
  data::import_cifar10(o.source, dir);  // an archive file or an image-folder directory
  return done(dir);
}

int run_data_get(const DataOptions& o) {
  const std::string dir = data_dir(o);
  data::download_cifar10(dir);
  return done(dir);
}

}  // namespace kiln::cli
