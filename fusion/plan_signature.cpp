// The structure of a trace as plan() sees it, and rebinding a reused plan's
// scalars (see include/fusion/kiln/fusion.h).
//
// A steady-state loop flushes traces of one structure again and again, with
// new buffers and new scalar values (a learning rate, a step count). For a
// 1,000-op trace, partitioning took 1.5 ms and writing and hashing this
// signature 0.12 ms (BM_Partition/1000, BM_PlanSignature/1000).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kiln/fusion.h"

namespace kiln::fusion {
namespace {

// Appends raw bytes through a cursor: a trace of a thousand ops writes some
// forty thousand small fields, and std::string::append per field cost three
// times as much. reserve() before each op makes room for all of its fields.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  ~Writer() { out_.resize(used_); }
  void reserve(size_t bytes) {
    if (out_.size() - used_ < bytes) out_.resize(std::max(out_.size() * 2, used_ + bytes));
  }
  template <typename T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::memcpy(out_.data() + used_, &v, sizeof(T));
    used_ += sizeof(T);
  }
  template <typename Vector>  // std::vector or InlineVector of trivially copyable elements
  void pods(const Vector& v) {
    using T = typename Vector::value_type;
    static_assert(std::is_trivially_copyable_v<T>);
    pod(v.size());
    if (!v.empty()) std::memcpy(out_.data() + used_, v.data(), v.size() * sizeof(T));
    used_ += v.size() * sizeof(T);
  }
  void view(const trace::View& v) {
    pod(v.buffer);
    pod(v.dtype);
    pod(v.offset);
    pods(v.strides);
  }
  // An upper bound of what view() writes.
  static size_t view_bytes(const trace::View& v) { return 32 + 8 * v.strides.size(); }

 private:
  std::string& out_;
  size_t used_ = 0;
};

void write_op(Writer& w, const trace::TraceOp& op) {
  size_t bytes = 64 + 8 * op.sizes.size() + sizeof(ir::DType) * op.scalars.size() + 32 * op.nodes.size() +
                 16 * op.reductions.size();
  for (const auto& v : op.loads) bytes += Writer::view_bytes(v);
  for (const auto& s : op.stores) bytes += Writer::view_bytes(s.view) + 8;
  w.reserve(bytes);
  w.pods(op.sizes);
  w.pod(op.reduced);
  w.pod(op.loads.size());
  for (const auto& v : op.loads) w.view(v);
  w.pod(op.scalars.size());  // the types, not the values
  for (const auto& s : op.scalars) w.pod(s.type);
  w.pod(op.nodes.size());
  for (const auto& n : op.nodes) {
    w.pod(n.op);
    w.pod(n.dtype);
    w.pod(n.in);
    w.pod(n.arg);
    w.pod(n.imm);  // a Constant's value is part of the kernel
  }
  w.pod(op.reductions.size());
  for (const auto& r : op.reductions) {
    w.pod(r.kind);
    w.pod(r.dtype);
    w.pod(r.value);
  }
  w.pod(op.stores.size());
  for (const auto& s : op.stores) {
    w.view(s.view);
    w.pod(s.value);
  }
}

}  // namespace

std::string plan_signature(const trace::Trace& trace, const Options& options) {
  std::string out;
  {
    Writer w(out);
    w.reserve(64 + trace.buffers.size() + trace.ops.size() * 256);
    w.pod(options.max_ops);
    w.pod(options.stream_min_bytes);
    // Buffers: which are dead decides which stores are dropped, and which
    // share memory (memory_of) which writes wait for which reads; which ops
    // share a buffer is in the views' buffer indices.
    w.pod(trace.buffers.size());
    for (const auto& b : trace.buffers) {
      w.pod(b.dead);
      w.pod(b.memory_of);
    }
    w.pod(trace.ops.size());
    for (const auto& op : trace.ops) write_op(w, op);
  }
  return out;
}

void bind_scalars(const PlannedKernel& kernel, const trace::Trace& trace, std::vector<int64_t>& ints,
                  std::vector<double>& scalars) {
  for (size_t s = 0; s < kernel.scalar_refs.size(); ++s) {
    const PlannedKernel::ScalarRef& ref = kernel.scalar_refs[s];
    const trace::Scalar& value = trace.ops.at(ref.op).scalars.at(ref.index);
    scalars[s] = value.f;
    ints[kernel.kernel.int_scalar_index(static_cast<int>(s))] = value.i;
  }
}

}  // namespace kiln::fusion
