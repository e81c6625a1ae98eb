// kiln::models::create: the zoo by name, for `kiln train --model` and the benchmarks.
#include "kiln/error.h"
#include "kiln/models.h"

namespace kiln::models {

std::shared_ptr<nn::Module> create(const std::string& name, double width, int64_t in_channels, int64_t num_classes,
                                   int64_t image_size) {
  const char* valid = "tutorial, resnet18, airbench";
  if (name == "airbench") return airbench(width, num_classes, in_channels);
  bool known = name == "tutorial" || name == "resnet18";
  KILN_CHECK(known, "models::create: unknown model '", name, "'; valid names: ", valid);
  KILN_CHECK(width == 1.0, "models::create: width ", width, " applies only to airbench, not to '", name,
             "'; leave it at 1");
  if (name == "tutorial") return tutorial_cnn(in_channels, num_classes, image_size);
  return resnet18(num_classes, in_channels);
}

}  // namespace kiln::models
