// TraceOp builders and op-name interning (see include/trace/kiln/trace.h).
#include "kiln/trace.h"

#include <mutex>
#include <string>
#include <unordered_set>

namespace kiln::trace {

const char* intern_op_name(std::string_view name) {
  static std::mutex mu;
  static auto* names = new std::unordered_set<std::string>();  // never freed: traces point into it
  std::lock_guard<std::mutex> lock(mu);
  return names->emplace(name).first->c_str();
}

int32_t TraceOp::add_node(ir::Op op, ir::DType t, int32_t a, int32_t b, int32_t c, int32_t arg, double imm) {
  ir::Node n;
  n.op = op;
  n.dtype = t;
  n.in[0] = a;
  n.in[1] = b;
  n.in[2] = c;
  n.arg = arg;
  n.imm = imm;
  nodes.push_back(n);
  return static_cast<int32_t>(nodes.size()) - 1;
}

int32_t TraceOp::load(View v) {
  const ir::DType t = v.dtype;
  loads.push_back(std::move(v));
  return add_node(ir::Op::Load, t, -1, -1, -1, static_cast<int32_t>(loads.size()) - 1);
}

int32_t TraceOp::scalar_float(double v) {
  scalars.push_back({ir::DType::Float64, v, 0});
  return add_node(ir::Op::Scalar, ir::DType::Float64, -1, -1, -1, static_cast<int32_t>(scalars.size()) - 1);
}

int32_t TraceOp::scalar_int(int64_t v, ir::DType t) {
  scalars.push_back({t, static_cast<double>(v), v});
  return add_node(ir::Op::Scalar, t, -1, -1, -1, static_cast<int32_t>(scalars.size()) - 1);
}

int32_t TraceOp::cast(int32_t node, ir::DType t) {
  if (nodes[node].dtype == t) return node;
  return add_node(ir::Op::Cast, t, node);
}

int32_t TraceOp::reduce(ir::ReduceKind kind, ir::DType t, int32_t value) {
  reductions.push_back({kind, t, value});
  return add_node(ir::Op::ReduceValue, t, -1, -1, -1, static_cast<int32_t>(reductions.size()) - 1);
}

void TraceOp::store(View v, int32_t value) {
  const int32_t stored = cast(value, v.dtype);
  stores.push_back({std::move(v), stored});
}

}  // namespace kiln::trace
