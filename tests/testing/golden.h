// Golden tensors made by PyTorch (tools/goldens/gen_*.py) and comparisons
// for tests.
#pragma once
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/compare.h"  // tensors_close, EXPECT_TENSOR_CLOSE

namespace kiln::testing {

class Goldens {
 public:
  // Loads tests/goldens/<family>.bin; a missing or corrupt file fails loudly.
  explicit Goldens(const std::string& family);
  // The tensor called `name`; throws kiln::Error naming the file if absent.
  Tensor operator[](const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

 private:
  std::string path_;
  std::map<std::string, Tensor> tensors_;
};

// The goldens of `family`, loaded on first use and kept for the whole run.
const Goldens& goldens(const std::string& family);

// Goldens whose name ends in "_T" hold a transposed layout: gives t.t() (a
// non-contiguous view) for those and t itself otherwise.
Tensor with_golden_layout(const std::string& name, Tensor t);

}  // namespace kiln::testing
