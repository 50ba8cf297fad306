// What a lowering sees of one ATen call: its arguments as trace values, its
// outputs as stores. Lowerings (lowering_table.cpp) build the op's TraceOp
// through it; commit() hands it to the device's recorder.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <vector>

#include "kiln/recorder.h"

namespace kiln::dispatch {

// kiln's IR dtype for a torch dtype; nullopt for those kernels cannot hold
// (complex, quantized, float8, unsigned beyond uint8).
std::optional<ir::DType> ir_dtype(at::ScalarType t);

// Thrown by a lowering that cannot take this call (a dtype, an argument
// value): the op then runs as a library kernel, as in eager mode.
struct Decline {};

class LowerCtx {
 public:
  // `fresh[j]`: output j was allocated for this call (not an argument written in place).
  LowerCtx(const char* name, const torch::jit::Stack& stack, size_t first, c10::ArrayRef<c10::IValue> outputs,
           c10::ArrayRef<bool> fresh);

  // ---- arguments
  std::string overload() const;  // "dim_int" of aten::prod.dim_int
  size_t num_args() const { return stack_.size() - first_; }
  const c10::IValue& arg(size_t i) const { return stack_[first_ + i]; }
  bool present(size_t i) const { return i < num_args() && !arg(i).isNone(); }
  const at::Tensor& tensor(size_t i) const;  // a device tensor argument
  const at::Tensor& out(size_t j) const;     // output j (fresh, or the tensor written in place / out=)
  size_t num_outputs() const { return outputs_.size(); }
  double scalar_value(size_t i) const;  // a Python number or CPU 0-dim tensor argument, now
  // The dtype TensorIterator computes in for these arguments (wrapped numbers
  // do not promote a tensor's category), and its opmath type.
  at::ScalarType common_dtype(std::initializer_list<size_t> args) const;
  static ir::DType opmath(at::ScalarType t);
  static ir::DType dtype(at::ScalarType t);  // Decline when unsupported

  // ---- the iteration space
  // Pointwise: the shape of output 0 (inputs broadcast to it).
  void pointwise_space();
  // Reduction of tensor argument `i` over `dims` (empty: all dims).
  void reduction_space(size_t i, std::vector<int64_t> dims);
  int64_t reduced_count() const;  // elements per reduced row

  // ---- values (nodes of the op's fragment)
  trace::TraceOp& op() { return op_; }
  int32_t value(size_t i, ir::DType as);  // argument i: a tensor load or a scalar, cast to `as`
  // Argument i as an operand of an op computing in `common` (TensorIterator's
  // common dtype), in its opmath type. Unlike value(), a Python number or a
  // 0-dim tensor of a wider dtype is first rounded to `common`, as
  // TensorIterator casts operands to it (-2.359 - bf16 subtracts
  // bf16(-2.359)). Only the second operand of mul/div and scalar parameters
  // (value, weight) skip that.
  int32_t operand(size_t i, at::ScalarType common);
  int32_t c(double v, ir::DType t) { return op_.constant(t, v); }
  int32_t n(ir::Op o, ir::DType t, int32_t a, int32_t b = -1, int32_t c = -1) { return op_.add_node(o, t, a, b, c); }
  void store(size_t j, int32_t node);  // output j; for reductions, mapped onto the kept dims

  // Declines when a tensor the op writes in place may overlap itself (an
  // expanded view) or partly overlap another argument (x.add_(x.t())):
  // eager refuses some of these and defines others by its own element
  // order; the library kernel then gives eager's answer or error. Called
  // after the lowering, on every traced op.
  void decline_overlaps() const;

  // Registers the views' buffers with the pending trace and appends the op
  // (inside Recorder::record).
  void commit(trace::PendingTrace& trace);

 private:
  trace::View view_of(const at::Tensor& t, bool output);
  bool overwrites_whole(const void* base) const;

  const char* name_;
  const torch::jit::Stack& stack_;
  size_t first_;
  c10::ArrayRef<c10::IValue> outputs_;
  trace::TraceOp op_;
  c10::ArrayRef<bool> fresh_outputs_;
  // Inline for the usual few operands: recording an op is on every op's
  // path, and each heap allocation there costs more once the process's heap
  // is fragmented (see kiln/inline_vector.h).
  c10::SmallVector<at::Tensor, 4> tensors_;  // view.buffer indexes these until commit
  c10::SmallVector<bool, 4> tensor_fresh_;
};

}  // namespace kiln::dispatch
