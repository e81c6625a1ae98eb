// The skip of a CUDA test without a usable device, with the reason.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "kiln/cuda.h"

namespace kiln::testing {

// "no CUDA device", then why (the driver's answer, or a build without CUDA).
inline std::string no_cuda_message() {
  std::string why = cuda::unavailable_reason();
  return why.rfind("no CUDA device", 0) == 0 ? why : "no CUDA device: " + why;
}

}  // namespace kiln::testing

#define SKIP_WITHOUT_CUDA() \
  if (!::kiln::cuda::is_available()) GTEST_SKIP() << ::kiln::testing::no_cuda_message()
