// TraceOp builders and op-name interning (see include/trace/kiln/trace.h).
#include "kiln/trace.h"

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include "kiln/hash_mix.h"

namespace kiln::trace {

namespace {

uint64_t mix_view(uint64_t h, const View& v) {
  h = mix_in(h, static_cast<uint64_t>(v.dtype));
  h = mix_in(h, static_cast<uint64_t>(v.offset));
  for (int64_t s : v.strides) h = mix_in(h, static_cast<uint64_t>(s));
  return h;
}

}  // namespace

uint64_t op_hash(const TraceOp& op) {
  uint64_t h = 0;
  for (const char* c = op.name; *c; ++c) h = mix_in(h, static_cast<unsigned char>(*c));
  for (int64_t s : op.sizes) h = mix_in(h, static_cast<uint64_t>(s));
  h = mix_in(h, op.reduced);
  for (const View& v : op.loads) h = mix_view(h, v);
  for (const Scalar& s : op.scalars) h = mix_in(h, static_cast<uint64_t>(s.type));
  for (const ir::Node& n : op.nodes) {
    h = mix_in(h, static_cast<uint64_t>(n.op) | static_cast<uint64_t>(n.dtype) << 8);
    for (int32_t in : n.in) h = mix_in(h, static_cast<uint32_t>(in));
    h = mix_in(h, static_cast<uint32_t>(n.arg));
    uint64_t imm = 0;
    std::memcpy(&imm, &n.imm, sizeof imm);
    h = mix_in(h, imm);
  }
  for (const ir::Reduction& r : op.reductions) {
    h = mix_in(h, static_cast<uint64_t>(r.kind) | static_cast<uint64_t>(r.dtype) << 8);
    h = mix_in(h, static_cast<uint32_t>(r.value));
  }
  for (const TraceOp::Output& o : op.stores) h = mix_in(mix_view(h, o.view), static_cast<uint32_t>(o.value));
  return h;
}

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
