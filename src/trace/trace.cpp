// TraceOp builders and the per-device recorder (see include/kiln/trace.h).
#include "kiln/trace.h"

namespace kiln::trace {

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
  scalar_types.push_back(ir::DType::Float64);
  scalar_f.push_back(v);
  scalar_i.push_back(0);
  return add_node(ir::Op::Scalar, ir::DType::Float64, -1, -1, -1, static_cast<int32_t>(scalar_types.size()) - 1);
}

int32_t TraceOp::scalar_int(int64_t v, ir::DType t) {
  scalar_types.push_back(t);
  scalar_f.push_back(static_cast<double>(v));
  scalar_i.push_back(v);
  return add_node(ir::Op::Scalar, t, -1, -1, -1, static_cast<int32_t>(scalar_types.size()) - 1);
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

int32_t Recorder::buffer(void* base, size_t nbytes, bool fresh, const std::shared_ptr<void>& keepalive) {
  auto it = live_.find(base);
  if (it != live_.end()) {
    Buffer& b = trace_.buffers[it->second];
    if (nbytes > b.nbytes) b.nbytes = nbytes;
    if (!b.fresh && !b.keepalive) b.keepalive = keepalive;
    return it->second;
  }
  Buffer b;
  b.base = base;
  b.nbytes = nbytes;
  b.fresh = fresh;
  if (!fresh) b.keepalive = keepalive;
  trace_.buffers.push_back(std::move(b));
  const auto id = static_cast<int32_t>(trace_.buffers.size()) - 1;
  live_.emplace(base, id);
  return id;
}

bool Recorder::touches(const void* base) const { return live_.count(base) != 0; }

bool Recorder::on_free(const void* base) {
  auto it = live_.find(base);
  if (it == live_.end()) return false;
  Buffer& b = trace_.buffers[it->second];
  live_.erase(it);  // the pool may hand the same address out again
  if (!b.fresh) return false;
  b.dead = true;
  return true;
}

Trace Recorder::take() {
  Trace t = std::move(trace_);
  trace_ = Trace{};
  // The next trace is likely as long: room for its ops up front, so that
  // recording does not move every op again each time the list doubles
  // (a TraceOp keeps its lists inline and is large to move).
  trace_.ops.reserve(t.ops.size());
  live_.clear();
  return t;
}

}  // namespace kiln::trace
