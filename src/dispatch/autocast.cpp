// Autocast for the device: the same op policies as CUDA (lower-precision
// matmuls and convolutions, fp32 for numerically sensitive ops), for float16
// and bfloat16.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace kiln::dispatch {
namespace {
using at::autocast::CastPolicy;
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using namespace at::autocast;
#define POLICY_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define POLICY_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_LOWER_PRECISION_FP(POLICY_LOWER_PRECISION)
  AT_FORALL_FP32(POLICY_FP32)
#undef POLICY_LOWER_PRECISION
#undef POLICY_FP32
}

}  // namespace kiln::dispatch
