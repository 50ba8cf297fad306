// Autocast for the device: CUDA's whole op policy (lower-precision matmuls
// and convolutions; fp32 for numerically sensitive ops, with or without an
// output dtype; the widest input type for ops that mix inputs; and
// binary_cross_entropy refused), for float16 and bfloat16.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace kiln::dispatch {
namespace {

// binary_cross_entropy is unsafe in lower precision; CUDA refuses it under
// autocast with this advice, and so does the device.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using namespace at::autocast;
  using at::IntArrayRef, at::Scalar, at::ScalarType, at::Tensor;  // the redispatch signatures name them bare
#define POLICY_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define POLICY_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define POLICY_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define POLICY_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(POLICY_LOWER_PRECISION)
  AT_FORALL_FP32(POLICY_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(POLICY_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(POLICY_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
#undef POLICY_LOWER_PRECISION
#undef POLICY_FP32
#undef POLICY_FP32_SET_OPT_DTYPE
#undef POLICY_PROMOTE
}

}  // namespace kiln::dispatch
