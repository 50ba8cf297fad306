// The fused LSTM and GRU cells. PyTorch's RNN code (nn.LSTM, nn.GRU,
// nn.LSTMCell, nn.GRUCell) takes the fused-cell path on every non-CPU
// device: matmuls without bias, then one op for the gate arithmetic and one
// for its backward. These have CUDA kernels only; on the device they are
// written as the pointwise ATen ops CPU's unfused cell runs, so lazy mode
// traces them and fuses a cell's gate arithmetic into one kernel.
//
// The workspaces keep CUDA's layouts (what the backward reads):
//   LSTM [B, 4H]: the activated gates i, f, g, o
//   GRU  [B, 5H]: r, z, n, hx, and the hidden gates' new part plus its bias
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

namespace kiln::dispatch {
namespace {

// Column block k of width h of a [B, n*h] gates tensor.
at::Tensor block(const at::Tensor& gates, int64_t k, int64_t h, int64_t count = 1) {
  return gates.narrow(1, k * h, count * h);
}

bool defined(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// ------------------------------------------------------------------ LSTM

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(),
              "_thnn_fused_lstm_cell: input_gates and hidden_gates must be [batch, 4 * hidden] and of one shape, got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(defined(input_bias) == defined(hidden_bias), "_thnn_fused_lstm_cell: give both biases or neither");
  const int64_t h = input_gates.size(1) / 4;
  TORCH_CHECK(input_gates.size(1) == 4 * h && cx.dim() == 2 && cx.size(0) == input_gates.size(0) && cx.size(1) == h,
              "_thnn_fused_lstm_cell: cx must be [batch, hidden] = [", input_gates.size(0), ", ", h, "], got ",
              cx.sizes());
  // Gate k's pre-activation in CUDA's order: input gates, hidden gates,
  // input bias, hidden bias. Each gate is computed from the inputs and only
  // written to the workspace, which nothing in the cell reads back: lazy
  // mode fuses the whole cell into one kernel over [batch, hidden].
  auto gate = [&](int64_t k) {
    at::Tensor sum = block(input_gates, k, h) + block(hidden_gates, k, h);
    if (defined(input_bias)) sum = sum + input_bias->narrow(0, k * h, h) + hidden_bias->narrow(0, k * h, h);
    return sum;
  };
  at::Tensor i = gate(0).sigmoid(), f = gate(1).sigmoid(), g = gate(2).tanh(), o = gate(3).sigmoid();
  at::Tensor cy = (f * cx).add_(i * g);
  at::Tensor hy = o * cy.tanh();
  at::Tensor workspace = at::empty({input_gates.size(0), 4 * h}, input_gates.options());
  block(workspace, 0, h).copy_(i);
  block(workspace, 1, h).copy_(f);
  block(workspace, 2, h).copy_(g);
  block(workspace, 3, h).copy_(o);
  return {hy, cy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                        const std::optional<at::Tensor>& grad_cy,
                                                                        const at::Tensor& cx, const at::Tensor& cy,
                                                                        const at::Tensor& workspace, bool has_bias) {
  if (!defined(grad_hy) && !defined(grad_cy)) return {};
  const int64_t h = cx.size(1);
  at::Tensor i = block(workspace, 0, h), f = block(workspace, 1, h);
  at::Tensor g = block(workspace, 2, h), o = block(workspace, 3, h);
  at::Tensor tanh_cy = cy.tanh();
  // What autograd computes through CPU's unfused cell: hy = o * tanh(cy),
  // cy = f * cx + i * g.
  at::Tensor grad_c = defined(grad_hy) ? at::tanh_backward(*grad_hy * o, tanh_cy) : at::zeros_like(cy);
  if (defined(grad_cy)) grad_c.add_(*grad_cy);
  at::Tensor grad_gates = at::empty_like(workspace, at::MemoryFormat::Contiguous);
  block(grad_gates, 0, h).copy_(at::sigmoid_backward(grad_c * g, i));
  block(grad_gates, 1, h).copy_(at::sigmoid_backward(grad_c * cx, f));
  block(grad_gates, 2, h).copy_(at::tanh_backward(grad_c * i, g));
  if (defined(grad_hy)) block(grad_gates, 3, h).copy_(at::sigmoid_backward(*grad_hy * tanh_cy, o));
  else block(grad_gates, 3, h).zero_();
  at::Tensor grad_cx = grad_c * f;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

// ------------------------------------------------------------------ GRU

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(),
              "_thnn_fused_gru_cell: input_gates and hidden_gates must be [batch, 3 * hidden] and of one shape, got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(defined(input_bias) == defined(hidden_bias), "_thnn_fused_gru_cell: give both biases or neither");
  const int64_t h = input_gates.size(1) / 3;
  TORCH_CHECK(input_gates.size(1) == 3 * h && hx.dim() == 2 && hx.size(0) == input_gates.size(0) && hx.size(1) == h,
              "_thnn_fused_gru_cell: hx must be [batch, hidden] = [", input_gates.size(0), ", ", h, "], got ",
              hx.sizes());
  const bool bias = defined(input_bias);
  // As for the LSTM: every value over [batch, hidden], the workspace only written.
  auto bias_block = [&](const std::optional<at::Tensor>& b, int64_t k) { return b->narrow(0, k * h, h); };
  auto gate = [&](int64_t k) {
    at::Tensor sum = block(input_gates, k, h) + block(hidden_gates, k, h);
    if (bias) sum = sum + bias_block(input_bias, k) + bias_block(hidden_bias, k);
    return sum;
  };
  at::Tensor r = gate(0).sigmoid(), z = gate(1).sigmoid();
  at::Tensor hn = bias ? block(hidden_gates, 2, h) + bias_block(hidden_bias, 2) : block(hidden_gates, 2, h);
  at::Tensor in = bias ? block(input_gates, 2, h) + bias_block(input_bias, 2) : block(input_gates, 2, h);
  at::Tensor n = in.add(r * hn).tanh_();
  at::Tensor hy = (hx - n).mul_(z).add_(n);
  at::Tensor workspace = at::empty({input_gates.size(0), 5 * h}, input_gates.options());
  block(workspace, 0, h).copy_(r);
  block(workspace, 1, h).copy_(z);
  block(workspace, 2, h).copy_(n);
  block(workspace, 3, h).copy_(hx);
  block(workspace, 4, h).copy_(hn);
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const int64_t h = workspace.size(1) / 5;
  at::Tensor r = block(workspace, 0, h), z = block(workspace, 1, h), n = block(workspace, 2, h);
  at::Tensor hx = block(workspace, 3, h), hn = block(workspace, 4, h);
  // Through hy = (hx - n) * z + n and n = tanh(in + r * hn).
  at::Tensor grad_n = at::tanh_backward(grad_hy - grad_hy * z, n);
  at::Tensor grad_r = at::sigmoid_backward(grad_n * hn, r);
  at::Tensor grad_z = at::sigmoid_backward(grad_hy * (hx - n), z);
  at::Tensor grad_input_gates = at::empty({workspace.size(0), 3 * h}, workspace.options());
  at::Tensor grad_hidden_gates = at::empty_like(grad_input_gates);
  for (const at::Tensor& gates : {grad_input_gates, grad_hidden_gates}) {
    block(gates, 0, h).copy_(grad_r);
    block(gates, 1, h).copy_(grad_z);
  }
  block(grad_input_gates, 2, h).copy_(grad_n);
  block(grad_hidden_gates, 2, h).copy_(grad_n * r);
  at::Tensor grad_hx = grad_hy * z;
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

}  // namespace kiln::dispatch
