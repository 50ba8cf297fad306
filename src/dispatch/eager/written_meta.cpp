// C++ meta kernels written by hand, for common ops whose only Meta kernel is
// a Python reference that imports torch._dynamo and sympy on its first call
// (0.3-1.3 s in a fresh process: an inference script's first layer_norm,
// relu, where, nn.TransformerEncoderLayer, scaled_dot_product_attention
// or convolution, a training script's first layer_norm or convolution
// backward)
// and has no C++ meta function in ATen to call instead (see
// cpp_meta.h). Each computes what the op's CPU kernel allocates, the way
// that kernel does; the first-sight check (argument_check.h) compares it
// with the CPU kernel's results for each new argument pattern, so a
// disagreement runs the op on the host instead of giving another geometry.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MetaFunctions.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>

#include <optional>
#include <vector>

#include "dispatch/eager/cpp_meta.h"

namespace kiln::dispatch {
namespace {

// at::native::relu: a bool input is refused, else clamp_min(self, 0).
at::Tensor relu_meta(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return at::meta::clamp_min(self, 0);
}

// at::native::where: an empty result of the promoted dtype, sized and
// strided by the TensorIterator that where_self_out builds over the
// condition and the operands converted to that dtype.
at::Tensor where_meta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  const at::ScalarType result_type = at::native::result_type(self, other);
  at::Tensor result = at::empty({0}, self.options().dtype(result_type));
  const at::Tensor self_ = self.scalar_type() != result_type ? self.to(result_type) : self;
  const at::Tensor other_ = other.scalar_type() != result_type ? other.to(result_type) : other;
  at::Tensor condition_ = condition.scalar_type() == at::kByte ? condition.to(at::kBool) : condition;
  TORCH_CHECK(condition_.scalar_type() == at::kBool, "where expected condition to be a boolean tensor.");
  at::TensorIteratorConfig()
      .check_all_same_dtype(false)
      .add_output(result)
      .add_const_input(condition_)
      .add_const_input(self_)
      .add_const_input(other_)
      .build();
  return result;
}

// at::native::layer_norm_cpu: a contiguous output like the input; mean and
// rstd of M elements (float for a reduced-float input with float
// parameters), viewed as the input's leading sizes and 1s.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_meta(const at::Tensor& input,
                                                                      c10::SymIntArrayRef normalized_shape,
                                                                      const std::optional<at::Tensor>& weight_opt,
                                                                      const std::optional<at::Tensor>& bias_opt,
                                                                      double /*eps*/) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const c10::IntArrayRef shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, shape, weight, bias);
  (void)N;
  const bool mixed_type = at::native::is_mixed_type(input, weight, bias);
  if (mixed_type) at::native::check_mixed_data_type(input, weight, bias);
  at::Tensor y = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  const auto stat_options = input.options().dtype(at::native::param_scalar_type(input, mixed_type));
  c10::DimVector stat_shape(input.sizes().begin(), input.sizes().end() - static_cast<int64_t>(shape.size()));
  stat_shape.resize(input.dim(), 1);
  at::Tensor mean = at::empty({M}, stat_options).view(stat_shape);
  at::Tensor rstd = at::empty({M}, stat_options).view(stat_shape);
  return {std::move(y), std::move(mean), std::move(rstd)};
}

// at::native::layer_norm_backward_cpu: each gradient the mask asks for,
// contiguous, sized and typed like the input, the weight or the bias.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward_meta(
    const at::Tensor& /*grad_out*/, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor& /*mean*/, const at::Tensor& /*rstd*/, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> output_mask) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  (void)at::native::_check_layer_norm_inputs(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight, bias);
  auto gradient_of = [](bool wanted, const at::Tensor& t) {
    if (!wanted || !t.defined()) return at::Tensor();
    return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  };
  return {gradient_of(output_mask[0], input), gradient_of(output_mask[1], weight), gradient_of(output_mask[2], bias)};
}

// at::native::transformer_encoder_layer_forward on a strided input: its
// result is the last layer_norm's or add's, contiguous whatever the input's
// strides (the Python meta gives the input's strides).
at::Tensor transformer_encoder_layer_fwd_meta(
    const at::Tensor& src, int64_t /*embed_dim*/, int64_t /*num_heads*/, const at::Tensor& /*qkv_weight*/,
    const at::Tensor& /*qkv_bias*/, const at::Tensor& /*proj_weight*/, const at::Tensor& /*proj_bias*/,
    bool /*use_gelu*/, bool /*norm_first*/, double /*eps*/, const at::Tensor& /*norm_weight_1*/,
    const at::Tensor& /*norm_bias_1*/, const at::Tensor& /*norm_weight_2*/, const at::Tensor& /*norm_bias_2*/,
    const at::Tensor& /*ffn_weight_1*/, const at::Tensor& /*ffn_bias_1*/, const at::Tensor& /*ffn_weight_2*/,
    const at::Tensor& /*ffn_bias_2*/, const std::optional<at::Tensor>& /*mask*/, std::optional<int64_t> /*mask_type*/) {
  return at::empty(src.sizes(), src.options().memory_format(at::MemoryFormat::Contiguous));
}

// at::native::_scaled_dot_product_flash_attention_cpu: an output laid out
// like the query (empty_like: a query transposed from (batch, length,
// heads, dim), as attention modules make it, gives an output so
// transposed, dense), and the log-sum-exp in the op-math dtype, allocated as
// (batch, length, heads) and returned transposed. Its other checks compare
// dtypes and sizes for equality: the first-sight check raises them.
std::tuple<at::Tensor, at::Tensor> flash_attention_for_cpu_meta(const at::Tensor& query, const at::Tensor& key,
                                                                const at::Tensor& value, double /*dropout_p*/,
                                                                bool /*is_causal*/,
                                                                const std::optional<at::Tensor>& /*attn_mask*/,
                                                                std::optional<double> /*scale*/) {
  // In the CPU kernel's order: a query of fewer than 3 dimensions raises
  // the IndexError of its size(2) before the check of the ranks.
  const int64_t batch = query.size(0), length = query.size(2), heads = query.size(1);
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "scaled_dot_product_attention_flash_attention: Accept only 4 dims inputs shape of {B, H, T, K}");
  // empty_like's preserve: the query's strides, made dense in their order
  // (a query sliced from a fused qkv projection has gaps).
  at::Tensor output =
      at::empty_strided(query.sizes(), at::infer_dense_strides(query.sizes(), query.strides()), query.options());
  at::Tensor logsumexp =
      at::empty({batch, length, heads}, query.options().dtype(at::toOpMathType(query.scalar_type()))).transpose(1, 2);
  return {std::move(output), std::move(logsumexp)};
}

// A CPU tensor with `meta`'s dtype and geometry and no memory (a storage
// of the meta one's size, with no data): what ATen's convolution backend
// choice reads (device, dtype, sizes, strides), which on a meta tensor
// would pick no CPU backend. Views of it may be taken; it is never read.
at::Tensor cpu_shell(const at::Tensor& meta) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(c10::Storage::use_byte_size_t(), meta.storage().nbytes(), c10::DataPtr(nullptr, at::kCPU),
                   /*allocator=*/nullptr, /*resizable=*/false),
      c10::DispatchKeySet(c10::DispatchKey::CPU), meta.dtype());
  impl->set_sizes_and_strides(meta.sizes(), meta.strides(), meta.storage_offset());
  return at::Tensor(std::move(impl));
}

// A parameter list of one value stands for the same value in every
// spatial dimension, as the convolution kernels take it.
int64_t param_at(c10::SymIntArrayRef values, size_t d) {
  return (values.size() == 1 ? values[0] : values[d]).guard_int(__FILE__, __LINE__);
}

// The memory format of the CPU convolution backend's results (output, and
// in backward the input's and weight's gradients): the backend ATen picks
// for these arguments, and its format (channels last for a channels-last
// input or weight, on most backends), as torch's FakeTensor conv finds it.
// ATen's check_shape_forward raises eager's errors for inconsistent shapes
// on the way. A 1-d convolution runs as a 2-d one over a contiguous input:
// its shells are made so, as the CPU kernel's .contiguous() would.
at::MemoryFormat conv_backend_format(const at::Tensor& input, const at::Tensor& weight,
                                     const std::optional<at::Tensor>& bias, at::OptionalSymIntArrayRef bias_sizes,
                                     c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                                     c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
                                     const c10::SymInt& groups) {
  const bool one_d = weight.dim() == 3;
  const at::Tensor input_shell = cpu_shell(one_d ? at::empty(input.sizes(), input.options()) : input);
  const at::Tensor weight_shell = cpu_shell(weight);
  const std::optional<at::Tensor> bias_shell =
      bias && bias->defined() ? std::optional<at::Tensor>(cpu_shell(*bias)) : std::nullopt;
  const at::native::ConvBackend backend =
      at::native::select_conv_backend(input_shell, weight_shell, bias_shell, stride, padding, dilation, transposed,
                                      output_padding, groups, bias_shell ? at::OptionalSymIntArrayRef() : bias_sizes);
  return one_d ? at::native::_determine_backend_memory_format(input_shell.unsqueeze(2), weight_shell.unsqueeze(2),
                                                              backend)
               : at::native::_determine_backend_memory_format(input_shell, weight_shell, backend);
}

// An empty tensor in a convolution backend's format; a 1-d one in channels
// last is the squeezed 2-d one, as the CPU kernel returns it.
at::Tensor empty_in_conv_format(std::vector<int64_t> sizes, const at::TensorOptions& options, at::MemoryFormat format) {
  if (sizes.size() == 3 && format == at::MemoryFormat::ChannelsLast) {
    sizes.insert(sizes.begin() + 2, 1);
    return at::empty(sizes, options.memory_format(format)).squeeze(2);
  }
  return at::empty(sizes, options.memory_format(format));
}

// at::native::convolution on the CPU: the output sizes of the convolution
// formulas, in the backend's format.
at::Tensor convolution_meta(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                            bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  const at::MemoryFormat format = conv_backend_format(input, weight, bias, std::nullopt, stride, padding, dilation,
                                                      transposed, output_padding, groups);
  const int64_t group_count = groups.guard_int(__FILE__, __LINE__);
  std::vector<int64_t> sizes{input.size(0), transposed ? weight.size(1) * group_count : weight.size(0)};
  for (int64_t d = 2; d < weight.dim(); ++d) {
    const auto i = static_cast<size_t>(d - 2);
    const int64_t kernel = param_at(dilation, i) * (weight.size(d) - 1) + 1;
    sizes.push_back(transposed ? (input.size(d) - 1) * param_at(stride, i) - 2 * param_at(padding, i) + kernel +
                                     param_at(output_padding, i)
                               : (input.size(d) + 2 * param_at(padding, i) - kernel) / param_at(stride, i) + 1);
  }
  if (input.size(1) == 0) sizes[1] = 0;
  return empty_in_conv_format(std::move(sizes), input.options(), format);
}

// at::native::convolution_backward on the CPU: the input's and weight's
// gradients sized like them, in the backend's format; the bias's contiguous.
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::OptionalSymIntArrayRef bias_sizes, c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
    c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups,
    std::array<bool, 3> output_mask) {
  const at::MemoryFormat format = conv_backend_format(input, weight, std::nullopt, bias_sizes, stride, padding,
                                                      dilation, transposed, output_padding, groups);
  const at::TensorOptions options = grad_output.options();
  auto sizes_of = [](const at::Tensor& t) { return std::vector<int64_t>(t.sizes().begin(), t.sizes().end()); };
  at::Tensor grad_input = output_mask[0] ? empty_in_conv_format(sizes_of(input), options, format) : at::Tensor();
  at::Tensor grad_weight = output_mask[1] ? empty_in_conv_format(sizes_of(weight), options, format) : at::Tensor();
  at::Tensor grad_bias;
  if (output_mask[2] && bias_sizes) grad_bias = at::empty(C10_AS_INTARRAYREF_SLOW(*bias_sizes), options);
  return {std::move(grad_input), std::move(grad_weight), std::move(grad_bias)};
}

}  // namespace

std::vector<std::pair<const char*, c10::KernelFunction>> written_meta_kernels() {
  return {
      {"aten::relu", c10::KernelFunction::makeFromUnboxedRuntimeFunction(&relu_meta)},
      {"aten::where.self", c10::KernelFunction::makeFromUnboxedRuntimeFunction(&where_meta)},
      {"aten::native_layer_norm", c10::KernelFunction::makeFromUnboxedRuntimeFunction(&native_layer_norm_meta)},
      {"aten::native_layer_norm_backward",
       c10::KernelFunction::makeFromUnboxedRuntimeFunction(&native_layer_norm_backward_meta)},
      {"aten::_transformer_encoder_layer_fwd",
       c10::KernelFunction::makeFromUnboxedRuntimeFunction(&transformer_encoder_layer_fwd_meta)},
      {"aten::_scaled_dot_product_flash_attention_for_cpu",
       c10::KernelFunction::makeFromUnboxedRuntimeFunction(&flash_attention_for_cpu_meta)},
      {"aten::convolution", c10::KernelFunction::makeFromUnboxedRuntimeFunction(&convolution_meta)},
      {"aten::convolution_backward", c10::KernelFunction::makeFromUnboxedRuntimeFunction(&convolution_backward_meta)},
  };
}

}  // namespace kiln::dispatch
