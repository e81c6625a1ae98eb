// The profiler's CUDA time (runtime/profiler.h): op calls with a CUDA input
// get the GPU's elapsed time per op, self time for composites; CPU ops none.
// Skips without a device.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/cuda_skip.h"

namespace kiln {
namespace {

TEST(CudaProfiler, OpsOnTheDeviceGetCudaTimeAndCompositesTheirSelfTime) {
  SKIP_WITHOUT_CUDA();
  const Device cuda = Device::cuda(0);
  Tensor a = randn({2048, 2048}).to(cuda), w = randn({2048, 2048}).to(cuda), b = randn({2048}).to(cuda);
  Tensor c = randn({64, 64});
  cuda::synchronize(0);
  Profile p;
  Tensor y;
  for (int i = 0; i < 5; ++i) y = addmm(b, a, w, 1.0, 1.0);  // addmm -> matmul on cuBLAS (~17 GFLOP) + add
  Tensor z = mul(c, c);                                       // a CPU op
  p.stop();
  const OpStats mm = p.op_stats("matmul"), lin = p.op_stats("addmm"), cpu_op = p.op_stats("mul");
  ASSERT_EQ(mm.calls, 5);
  // 5 x 17 GFLOP in float32 takes well over 0.1 ms on any GPU; the host
  // returns from the launches long before the device finishes.
  EXPECT_GT(mm.cuda_ms, 0.1);
  EXPECT_GE(lin.cuda_ms, 0.0);
  EXPECT_LT(lin.cuda_ms, mm.cuda_ms) << "addmm's own CUDA time excludes the matmul inside it";
  EXPECT_EQ(cpu_op.cuda_ms, 0.0);
  EXPECT_NE(p.table_string().find("cuda ms"), std::string::npos) << p.table_string();
}

TEST(CudaProfiler, CpuOnlyProfilesHaveNoCudaColumn) {
  Profile p;
  Tensor x = add(randn({8}), 1.0);
  p.stop();
  EXPECT_EQ(p.table_string().find("cuda ms"), std::string::npos);
}

}  // namespace
}  // namespace kiln
