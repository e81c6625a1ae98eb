// The autocast policy of every op (ops/autocast_policy.h). A switch with no
// default: an op added to ops.def without a policy here is a compile error
// (-Wswitch under -Werror), so no op silently escapes the table.
//
// The lists follow PyTorch's CUDA autocast lists
// (aten/src/ATen/autocast_mode.cpp) where kiln has the op, and say why where
// kiln differs.
#include "ops/autocast_policy.h"

namespace kiln {

AutocastPolicy autocast_policy(OpId id) {
  using enum AutocastPolicy;
  switch (id) {
    // ---- matrix products: the work autocast exists for ----
    // cuBLASLt and cuDNN run 16-bit operands on tensor cores with float32
    // accumulation; linear and addmm are listed (not only matmul) so that
    // their bias is cast with the weight and the decomposition's add stays
    // in 16 bits.
    case OpId::matmul:
    case OpId::addmm:
    case OpId::linear:
    case OpId::conv2d:
      return LowerPrecision;

    // ---- ranges and long sums: float32 ----
    // exp overflows float16 above 11; log, rsqrt and pow lose most of their
    // digits near 0 or 1 in 16 bits.
    case OpId::exp:
    case OpId::log:
    case OpId::rsqrt:
    case OpId::pow:
    // Sums over many elements: a 16-bit output rounds away the small terms
    // (PyTorch lists sum; kiln adds mean and var, whose outputs feed
    // normalizations).
    case OpId::sum:
    case OpId::mean:
    case OpId::var:
    // Probabilities and losses: exp of differences, sums over classes, and
    // the loss value the optimizer (and a gradient scaler) reads.
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::nll_loss:
    case OpId::cross_entropy:
      return Float32;

    // ---- one dtype for all inputs: the widest ----
    // These ops require equal dtypes (or would silently narrow one input);
    // a 16-bit activation joined with a float32 one becomes float32.
    case OpId::cat:
    case OpId::stack:
    case OpId::where:
    case OpId::index_add:
    case OpId::scatter_add:
      return Promote;

    // ---- as they come ----
    // batch_norm takes a 16-bit input with float32 weight, bias and running
    // statistics and computes its statistics in float32/float64 on both
    // devices (cuDNN's convention too): casting the input up would cost a
    // full float32 copy of every activation for nothing.
    case OpId::batch_norm:
    // Binary and unary pointwise ops: PyTorch's type promotion already runs a
    // 16-bit tensor with a float32 one in float32, and these are accurate in
    // 16 bits (bounded outputs, or exact: neg, abs, relu, comparisons); the
    // kernels compute in float32 and round once.
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
    case OpId::maximum:
    case OpId::minimum:
    case OpId::neg:
    case OpId::sqrt:
    case OpId::abs:
    case OpId::sign:
    case OpId::relu:
    case OpId::gelu:
    case OpId::sigmoid:
    case OpId::tanh:
    case OpId::erf:
    case OpId::clamp:
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
    case OpId::logical_not:
    case OpId::cast:
    // Exact in any dtype: maxima, indices, pooling windows (a few terms),
    // selections, dropout's mask.
    case OpId::amax:
    case OpId::amin:
    case OpId::argmax:
    case OpId::max_pool2d:
    case OpId::avg_pool2d:
    case OpId::adaptive_avg_pool2d:
    case OpId::adaptive_max_pool2d:
    case OpId::index_select:
    case OpId::gather:
    case OpId::one_hot:
    case OpId::dropout:
    // Views and copies move values without arithmetic.
    case OpId::view:
    case OpId::permute:
    case OpId::slice:
    case OpId::select:
    case OpId::expand:
    case OpId::squeeze:
    case OpId::unsqueeze:
    case OpId::as_strided:
    case OpId::reshape:
    case OpId::flatten:
    case OpId::transpose:
    case OpId::contiguous:
    case OpId::copy:
    case OpId::to_device:
    // Backward ops: autocast steps aside while backward() runs (derivatives
    // run in the dtypes the forward chose), so it never sees these there;
    // called directly they keep their inputs' dtypes.
    case OpId::slice_backward:
    case OpId::gelu_backward:
    case OpId::relu_backward:
    case OpId::softmax_backward:
    case OpId::log_softmax_backward:
    case OpId::conv2d_backward_input:
    case OpId::conv2d_backward_weight:
    case OpId::max_pool2d_backward:
    case OpId::avg_pool2d_backward:
    case OpId::batch_norm_backward:
    case OpId::nll_loss_backward:
    // Factories and random draws take their dtype from an attribute.
    case OpId::full:
    case OpId::arange:
    case OpId::rand:
    case OpId::randn:
    case OpId::randint:
    case OpId::bernoulli:
    // In-place updates (optimizer steps, fills) write their first input in
    // its own dtype: casting it would update a copy.
    case OpId::fill_:
    case OpId::copy_:
    case OpId::add_:
    case OpId::mul_:
    case OpId::addcmul_:
    case OpId::addcdiv_:
    case OpId::lerp_:
      return AsIs;
  }
  KILN_ASSERT(false, "autocast_policy: op id ", static_cast<int>(id), " is outside ops.def");
  return AsIs;
}

const char* autocast_policy_name(AutocastPolicy p) {
  switch (p) {
    case AutocastPolicy::LowerPrecision: return "lower_precision";
    case AutocastPolicy::Float32: return "float32";
    case AutocastPolicy::Promote: return "promote";
    case AutocastPolicy::AsIs: return "as_is";
  }
  return "?";
}

std::optional<DType> autocast_target(AutocastPolicy p, DType input, DType low, DType widest) {
  if (!is_floating(input)) return std::nullopt;
  switch (p) {
    case AutocastPolicy::LowerPrecision:
      if (input == DType::Float64 || input == low) return std::nullopt;
      return low;
    case AutocastPolicy::Float32:
      if (input != DType::Float16 && input != DType::BFloat16) return std::nullopt;
      return DType::Float32;
    case AutocastPolicy::Promote:
      if (input == widest) return std::nullopt;
      return widest;
    case AutocastPolicy::AsIs:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace kiln
