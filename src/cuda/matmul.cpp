// matmul and linear on CUDA through cuBLASLt (linear's bias in the product's
// epilogue): float32 (full float32 arithmetic, no TF32, so results match the
// CPU's), float64, and float16/bfloat16 with float32 accumulation. Strided
// and transposed operands go to cuBLASLt as they are (a transpose flag and a
// leading dimension); only operands with neither of the last two dims
// unit-stride, or broadcast batches, are copied.
//
// cuBLASLt is column-major: row-major C = A B is computed as C^T = B^T A^T,
// whose column-major operands are exactly the row-major buffers.
#include <cublasLt.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "cuda/check.h"
#include "cuda/kernels.h"
#include "kiln/cuda.h"
#include "kiln/ops.h"
#include "ops/matmul_batch.h"
#include "ops/op_def.h"

namespace kiln::cuda {

[[noreturn]] void throw_cublas_error(int status, const char* what, const char* call) {
  KILN_FAIL(what, ": cuBLASLt error ", status, " (", cublasLtGetStatusString(static_cast<cublasStatus_t>(status)),
            ") from ", call);
}

#define KILN_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                          \
    cublasStatus_t kiln_st_ = (call);                                                           \
    if (kiln_st_ != CUBLAS_STATUS_SUCCESS) throw_cublas_error(static_cast<int>(kiln_st_), "matmul", #call); \
  } while (0)

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxDevices = 64;

struct DeviceBlas {
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;
};

DeviceBlas& blas_for(int device) {
  static std::array<DeviceBlas, kMaxDevices> all;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  DeviceBlas& b = all[static_cast<size_t>(device)];
  if (b.handle == nullptr) {
    KILN_CUBLAS_CHECK(cublasLtCreate(&b.handle));
    b.workspace = Tensor::empty({static_cast<int64_t>(kWorkspaceBytes)}, DType::UInt8, Device::cuda(device));
  }
  return b;
}

// One column-major operand for cuBLASLt.
struct LtOperand {
  const void* data = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0, batch_stride = 0;
};

// The row-major [B, R, C] tensor t as the column-major matrix t^T (C x R):
// directly when its last dim is unit-stride, as t with a transpose flag when
// its middle dim is; nullopt otherwise (the caller copies it).
std::optional<LtOperand> transposed_view(const Tensor& t) {
  const int64_t R = t.shape()[1], C = t.shape()[2];
  int64_t sB = t.strides()[0], sR = t.strides()[1], sC = t.strides()[2];
  if (R == 1) sR = C;  // the stride of a size-1 dim addresses nothing
  if (C == 1) sC = 1;
  if (t.shape()[0] > 1 && sB == 0) return std::nullopt;  // broadcast batch
  LtOperand o;
  o.data = t.data_ptr();
  o.batch_stride = t.shape()[0] > 1 ? sB : 0;
  if (sC == 1 && sR >= std::max<int64_t>(C, 1)) {
    o.op = CUBLAS_OP_N;
    o.rows = static_cast<uint64_t>(C);
    o.cols = static_cast<uint64_t>(R);
    o.ld = sR;
    return o;
  }
  if (C == 1) sC = R;  // a column: either reading works; prefer the flag path below
  if (sR == 1 && sC >= std::max<int64_t>(R, 1)) {
    o.op = CUBLAS_OP_T;
    o.rows = static_cast<uint64_t>(R);
    o.cols = static_cast<uint64_t>(C);
    o.ld = sC;
    return o;
  }
  return std::nullopt;
}

LtOperand operand(Tensor& t) {
  if (auto o = transposed_view(t)) return *o;
  t = t.contiguous();
  return *transposed_view(t);
}

struct Layout {
  cublasLtMatrixLayout_t desc = nullptr;
  Layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, int batch, int64_t batch_stride) {
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc, type, rows, cols, ld));
    if (batch > 1) {
      KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
      KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                         &batch_stride, sizeof(batch_stride)));
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(desc); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

// The largest power of two (up to 256) dividing a pointer: cuBLASLt's
// heuristics assume 256-byte-aligned operands unless told, and a sliced
// operand may be less aligned.
uint32_t alignment(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// Everything a cuBLASLt heuristic answer depends on: device, dtype,
// operand shapes, strides, batch and pointer alignments, and whether a bias
// epilogue adds a vector over the output's columns (linear's bias).
using PlanKey = std::array<int64_t, 19>;

// The descriptors and the algorithm of one matmul shape, asked once: the
// heuristic costs tens of microseconds, as much as a small product.
struct MatmulPlan {
  cublasLtMatmulDesc_t op_desc = nullptr;
  std::unique_ptr<Layout> la, lb, lc;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  MatmulPlan() = default;
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;
  ~MatmulPlan() {
    if (op_desc) cublasLtMatmulDescDestroy(op_desc);
  }
};

const MatmulPlan& plan_for(cublasLtHandle_t handle, const PlanKey& k, cudaDataType_t data_type,
                           cublasComputeType_t compute, cudaDataType_t scale_type) {
  static std::map<PlanKey, std::unique_ptr<MatmulPlan>> cache;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(k);
  if (it != cache.end()) return *it->second;
  auto p = std::make_unique<MatmulPlan>();
  const auto opA = static_cast<cublasOperation_t>(k[2]), opB = static_cast<cublasOperation_t>(k[3]);
  const int batch = static_cast<int>(k[14]);
  KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op_desc, compute, scale_type));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op_desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op_desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
  if (k[18] != 0) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  }
  p->la = std::make_unique<Layout>(data_type, static_cast<uint64_t>(k[4]), static_cast<uint64_t>(k[5]), k[6], batch,
                                   k[7]);
  p->lb = std::make_unique<Layout>(data_type, static_cast<uint64_t>(k[8]), static_cast<uint64_t>(k[9]), k[10], batch,
                                   k[11]);
  const int64_t N = k[12], rows_c = k[13];
  p->lc = std::make_unique<Layout>(data_type, static_cast<uint64_t>(N), static_cast<uint64_t>(rows_c), N, batch,
                                   rows_c * N);
  cublasLtMatmulPreference_t pref = nullptr;
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  size_t ws = kWorkspaceBytes;
  KILN_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align_a = static_cast<uint32_t>(k[15]), align_b = static_cast<uint32_t>(k[16]);
  const uint32_t align_c = static_cast<uint32_t>(k[17]);
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                         sizeof(align_a)));
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                         sizeof(align_b)));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align_c, sizeof(align_c)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  KILN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, p->op_desc, p->la->desc, p->lb->desc, p->lc->desc,
                                                   p->lc->desc, pref, 1, &result, &found));
  p->found = found > 0;
  p->algo = result.algo;
  if (std::getenv("KILN_CUBLAS_LOG") != nullptr)  // as KILN_CUDNN_LOG: which plans cuBLASLt gave
    std::fprintf(stderr, "kiln cublaslt: dtype %d, A %lldx%lld, B %lldx%lld, C %lldx%lld, batch %d%s: %s\n",
                 static_cast<int>(k[1]), static_cast<long long>(k[4]), static_cast<long long>(k[5]),
                 static_cast<long long>(k[8]), static_cast<long long>(k[9]), static_cast<long long>(N),
                 static_cast<long long>(rows_c), batch, k[18] != 0 ? ", bias epilogue" : "",
                 p->found ? "algorithm found" : "no algorithm");
  return *cache.emplace(k, std::move(p)).first->second;
}

}  // namespace

namespace {

// c = a b (batched, broadcast), plus `bias` (a vector over c's last dim, of
// c's dtype, or null) in cuBLASLt's epilogue. Returns false, having run
// nothing, when cuBLASLt has no algorithm with that epilogue.
bool run_matmul(const Tensor& a, const Tensor& b, Tensor& c, const void* bias) {
  const DType dt = c.dtype();
  cudaDataType_t data_type;
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  switch (dt) {
    case DType::Float32: data_type = CUDA_R_32F, compute = CUBLAS_COMPUTE_32F, scale_type = CUDA_R_32F; break;
    case DType::Float64: data_type = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F, scale_type = CUDA_R_64F; break;
    case DType::Float16: data_type = CUDA_R_16F, compute = CUBLAS_COMPUTE_32F, scale_type = CUDA_R_32F; break;
    case DType::BFloat16: data_type = CUDA_R_16BF, compute = CUBLAS_COMPUTE_32F, scale_type = CUDA_R_32F; break;
    default:
      KILN_FAIL("matmul: ", dtype_name(dt), " operands are not supported on CUDA (cuBLASLt takes float32, float64, "
                "float16 and bfloat16); cast them, or compute on the CPU with .to(Device::cpu())");
  }
  if (c.numel() == 0) return true;
  const int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1], N = b.shape()[b.dim() - 1];
  if (K == 0) {
    if (bias != nullptr) return false;
    c.fill_(0.0);
    return true;
  }
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ab, bb, "matmul (batch dims)");
  int64_t B = numel_of(batch);
  Tensor a3, b3;
  if (b.dim() == 2 && a.dim() > 2) {
    // [batch..., M, K] x [K, N]: one [B*M, K] x [K, N] product.
    a3 = a.reshape({1, B * M, K});
    b3 = b.unsqueeze(0);
    B = 1;
  } else {
    a3 = as_batched3(a, batch);
    b3 = as_batched3(b, batch);
  }
  const int64_t rows_c = a3.shape()[1];  // M, or B*M when folded
  // C^T (N x rows_c) = B^T (N x K) * A^T (K x rows_c); the bias runs along
  // C^T's rows, one value per output feature, as cuBLASLt's epilogue adds it.
  LtOperand A = operand(b3), Bop = operand(a3);
  const int batch_count = static_cast<int>(B);

  const int device = c.device().index;
  DeviceBlas& blas = blas_for(device);
  const PlanKey key{device, static_cast<int64_t>(dt), A.op, Bop.op, static_cast<int64_t>(A.rows),
                    static_cast<int64_t>(A.cols), A.ld, A.batch_stride, static_cast<int64_t>(Bop.rows),
                    static_cast<int64_t>(Bop.cols), Bop.ld, Bop.batch_stride, N, rows_c, batch_count,
                    alignment(A.data), alignment(Bop.data), alignment(c.data_ptr()), bias != nullptr ? 1 : 0};
  const MatmulPlan& plan = plan_for(blas.handle, key, data_type, compute, scale_type);
  if (!plan.found) {
    if (bias != nullptr) return false;
    KILN_FAIL("matmul: cuBLASLt has no algorithm for ", dtype_name(dt), shape_str(a.shape()), " x ",
              shape_str(b.shape()), "; make the operands contiguous or compute on the CPU");
  }
  // The bias pointer changes per call and lives on the cached descriptor:
  // set and launch under one lock, so two threads cannot swap biases.
  static std::mutex bias_mu;
  std::unique_lock<std::mutex> bias_lock(bias_mu, std::defer_lock);
  if (bias != nullptr) {
    bias_lock.lock();
    KILN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const size_t ws = kWorkspaceBytes;
  const double alpha64 = 1.0, beta64 = 0.0;
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const void* alpha = scale_type == CUDA_R_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = scale_type == CUDA_R_64F ? static_cast<const void*>(&beta64) : &beta32;
  KILN_CUBLAS_CHECK(cublasLtMatmul(blas.handle, plan.op_desc, alpha, A.data, plan.la->desc, Bop.data, plan.lb->desc,
                                   beta, c.data_ptr(), plan.lc->desc, c.data_ptr(), plan.lc->desc, &plan.algo,
                                   blas.workspace.data_ptr(), ws, stream_for(device)));
  return true;
}

}  // namespace

void matmul_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) { run_matmul(in[0], in[1], out[0], nullptr); }

// linear: x w^T with the bias in cuBLASLt's epilogue (one kernel, as torch's
// addmm) where the bias is a contiguous [out_features] vector of the output's
// dtype and cuBLASLt has an algorithm for it; else the product, then add_.
void linear_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor w_t = in[1].t();
  Tensor& y = out[0];
  const bool bias = in.size() > 2 && in[2].defined();
  if (x.dim() == 1 || y.dtype() != x.dtype()) {  // the op's rare shapes: its decomposition
    y.copy_(op_def(OpId::linear).decompose(in, a)[0]);
    return;
  }
  const Tensor& b = bias ? in[2] : Tensor();
  const bool epilogue = bias && b.dim() == 1 && b.shape()[0] == w_t.shape()[1] && b.is_contiguous() &&
                        aligned16(b.data_ptr());
  if (epilogue && run_matmul(x, w_t, y, b.data_ptr())) return;
  run_matmul(x, w_t, y, nullptr);
  if (bias) y.add_(b);
}

}  // namespace kiln::cuda
