// scaled_dot_product_attention on the device takes the path eager CPU takes.
//
// sdpa asks a per-device stub which backend to run, and a device without a
// registered stub gets the math path: bmm + masking + softmax + bmm, with its
// own numerics and a [B, H, L, S] score tensor. CPU's stub picks PyTorch's
// flash-attention CPU kernel whenever its checks pass. The device's memory is
// host memory, so the device gives the same answer CPU would: the flash op
// then runs as a library kernel (the CPU implementation on device memory),
// forward and backward, with CPU's bits and without the score tensor.
#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>

#include <optional>

namespace at::native {
// CPU's backend choice (sdp_utils_cpp.cpp). It reads only the arguments'
// metadata (shapes, strides, dtypes, dropout, the mask's shape), none of it
// device-specific; libtorch_cpu exports it without a header.
int64_t _fused_sdp_choice_cpp(const Tensor& query, const Tensor& key, const Tensor& value,
                              const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                              std::optional<double> scale, bool enable_gqa);
}  // namespace at::native

namespace kiln::dispatch {
namespace {

int64_t choose_attention_backend(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                 const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                                 std::optional<double> scale, bool enable_gqa) {
  return at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace
}  // namespace kiln::dispatch

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &kiln::dispatch::choose_attention_backend);
}
