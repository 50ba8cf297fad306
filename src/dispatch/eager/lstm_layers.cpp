// nn.LSTM on the device runs the layer kernel eager CPU runs.
//
// at::lstm picks oneDNN's LSTM layer (aten::mkldnn_rnn_layer: one call per
// layer and direction, forward and backward) only for CPU tensors; on any
// other device it steps through time with a matmul and a fused cell per
// step (rnn_cells.cpp): for a 2-layer LSTM over 35 steps, 420 matmul
// launches per training step and a trace flush at each. The device's memory
// is host memory, so the device runs CPU's layer kernel as a library kernel
// instead: CPU's bits, and two launches per layer. The layer op has its own
// autograd formula, so this kernel sits at AutogradPrivateUse1 and only
// composes ops, as the composite at::lstm does.
#include <ATen/ATen.h>
#include <ATen/ops/lstm_native.h>
#include <torch/library.h>

#include <vector>

namespace kiln::dispatch {
namespace {

// The layer op's `mode` argument: oneDNN's rnn_kind::LSTM, what CPU passes.
constexpr int64_t kOneDnnLstm = 2;

// When CPU would run oneDNN's layer for the same arguments (at::native's
// use_mkldnn), minus what this path does not take: float32 only (bfloat16
// and half depend on CPU checks that are not exported) and no projections.
bool takes_the_layer_kernel(const at::Tensor& input, at::TensorList hx, at::TensorList params) {
  if (!at::globalContext().userEnabledMkldnn() || input.scalar_type() != at::kFloat || input.numel() == 0) return false;
  if (hx.size() != 2 || hx[0].size(2) != hx[1].size(2)) return false;  // projections: hy narrower than cy
  for (const at::Tensor& t : params)
    if (t.scalar_type() != at::kFloat || t.layout() != at::kStrided) return false;
  return true;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(const at::Tensor& input_, at::TensorList hx, at::TensorList params,
                                                    bool has_biases, int64_t num_layers, double dropout_p, bool train,
                                                    bool bidirectional, bool batch_first) {
  if (!takes_the_layer_kernel(input_, hx, params)) {
    return at::native::lstm(input_, hx, params, has_biases, num_layers, dropout_p, train, bidirectional, batch_first);
  }
  // As CPU's oneDNN path lays it out: time-major contiguous input, one
  // (w_ih, w_hh, b_ih, b_hh) group per layer and direction, zeros for
  // absent biases.
  const int64_t directions = bidirectional ? 2 : 1;
  const int64_t per_layer = has_biases ? 4 : 2;
  TORCH_CHECK(static_cast<int64_t>(params.size()) == num_layers * directions * per_layer, "lstm: expected ",
              num_layers * directions * per_layer, " weight tensors, got ", params.size());
  const int64_t hidden_size = hx[0].size(2);
  at::Tensor layer_input = (batch_first ? input_.transpose(0, 1) : input_).contiguous();
  const at::Tensor h0 = hx[0].contiguous(), c0 = hx[1].contiguous();
  std::vector<at::Tensor> hy(num_layers * directions), cy(num_layers * directions);
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<at::Tensor> outputs(directions);
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t index = layer * directions + direction;
      const at::Tensor* w = params.data() + index * per_layer;
      at::Tensor b_ih = has_biases ? w[2] : at::zeros(w[0].sizes(), w[0].options());
      at::Tensor b_hh = has_biases ? w[3] : at::zeros(w[1].sizes(), w[1].options());
      std::tie(outputs[direction], hy[index], cy[index], std::ignore) = at::mkldnn_rnn_layer(
          layer_input, w[0], w[1], b_ih, b_hh, h0[index], c0[index], /*reverse=*/direction > 0,
          /*batch_sizes=*/{}, kOneDnnLstm, hidden_size, num_layers, has_biases, bidirectional, batch_first, train);
    }
    layer_input = directions == 1 ? outputs[0] : at::cat(outputs, -1);
    if (dropout_p != 0 && train && layer < num_layers - 1) layer_input = at::dropout(layer_input, dropout_p, true);
  }
  at::Tensor output = batch_first ? layer_input.transpose(0, 1) : layer_input;
  return {output, at::stack(hy, 0), at::stack(cy, 0)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("lstm.input", lstm); }

}  // namespace kiln::dispatch
