// Micro-traces: the ops recorded on a device since its last flush.
//
// Each recorded op is a small Kernel-IR fragment over its own iteration
// space, reading and writing strided views of device buffers. Fusion groups
// consecutive ops into regions and stitches their fragments into kernels.
// No torch: the dispatch layer lowers ATen ops into TraceOps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "kiln/inline_vector.h"
#include "kiln/kernel_ir.h"

namespace kiln::trace {

// How much of a trace op's lists live inside it (InlineVector): enough for
// the usual op (rank <= 5, three operands, two Python scalars, eight nodes),
// so that recording one allocates nothing for them.
constexpr size_t kInlineRank = 5;

// A device allocation the trace touches.
struct Buffer {
  void* base = nullptr;
  size_t nbytes = 0;
  // Allocated for an output of this trace, or overwritten whole by the
  // trace's first op that touches it: nothing outside the trace will see
  // what it held before, so if its owner frees it before the flush
  // (`dead`), its stores can be dropped.
  bool fresh = false;
  bool dead = false;
  // Keeps a buffer that is not fresh alive until the flush has launched.
  std::shared_ptr<void> keepalive;
  // An output given the memory of a buffer only the trace still held
  // (Recorder::adopt_held_block; fresh, same base): that buffer's id, whose
  // reads its writes must follow (fusion.md, rule 6).
  int32_t memory_of = -1;
};

// A strided view of a buffer over an iteration space, in elements of
// `dtype`. One stride per dim of the space; 0 along broadcast dims and,
// canonically, along every dim of size 1.
struct View {
  int32_t buffer = -1;
  ir::DType dtype = ir::DType::Float32;
  int64_t offset = 0;
  InlineVector<int64_t, kInlineRank> strides;
  bool operator==(const View&) const = default;
};

// A runtime scalar of an op (a Python number: alpha, a learning rate). A
// kernel reads a floating one from LaunchArgs::scalars and an integer one
// from LaunchArgs::ints, so both forms travel (a float's `i` is 0); only
// `type` shapes the code.
struct Scalar {
  ir::DType type = ir::DType::Float64;
  double f = 0;
  int64_t i = 0;
};

// One recorded op.
struct TraceOp {
  // "aten::add.Tensor", for logs, errors and metrics: a string literal or an
  // interned name (intern_op_name), so that recording an op does not copy it.
  const char* name = "";
  InlineVector<int64_t, kInlineRank> sizes;  // iteration space (rank >= 1)
  uint64_t reduced = 0;                      // bit d: dim d is reduced
  InlineVector<View, 3> loads;               // Load nodes index these
  InlineVector<Scalar, 2> scalars;           // Scalar nodes index these
  InlineVector<ir::Node, 8> nodes;           // fragment; ReduceValue indexes `reductions`
  InlineVector<ir::Reduction, 1> reductions;
  struct Output {
    View view;           // stride 0 along reduced dims for reduced outputs
    int32_t value = -1;  // node
  };
  InlineVector<Output, 2> stores;

  // Helpers for lowerings.
  int32_t add_node(ir::Op op, ir::DType t, int32_t a = -1, int32_t b = -1, int32_t c = -1, int32_t arg = -1,
                   double imm = 0);
  int32_t load(View v);
  int32_t scalar_float(double v);
  int32_t scalar_int(int64_t v, ir::DType t = ir::DType::Int64);
  int32_t constant(ir::DType t, double v) { return add_node(ir::Op::Constant, t, -1, -1, -1, -1, v); }
  int32_t cast(int32_t node, ir::DType t);  // no node when already `t`
  int32_t reduce(ir::ReduceKind kind, ir::DType t, int32_t value);
  void store(View v, int32_t value);
};

// The launch of a recorded op's library kernel, held by a trace until its
// flush decides how the trace runs (Trace::hold_until_ops).
struct HeldLaunch {
  std::string_view name;  // lives as long as the process (an op's name, a literal)
  std::function<void()> work;
  std::function<void()> count;  // its metrics, added when it is launched
};

struct Trace {
  std::vector<Buffer> buffers;
  std::vector<TraceOp> ops;
  // The adaptive policy's key for this trace, given when its first op was
  // recorded (engine::start_trace): which trace this is, as far as can be
  // told before its other ops arrive.
  uint64_t start_key = 0;
  // Its ops ran as library kernels as they were recorded (the engine's
  // library tier): a flush plans it and compiles its fused kernels for its
  // next occurrences, but launches nothing.
  bool ran_as_library = false;
  // Above 0: the trace's first op is large (engine::start_trace); its ops'
  // library launches are held in `held_launches` until it has this many
  // ops, when it runs fused from its first occurrence and drops them. A
  // trace flushed before then launches them: it ran as library kernels.
  int hold_until_ops = 0;
  std::vector<HeldLaunch> held_launches;
  // torch.use_deterministic_algorithms(True) was on at its first op: its
  // tiers are decided by counts alone, whatever the caches hold.
  bool counts_only = false;
  // Under KILN_QUEUE_LOW_WATERMARK: a hash of the ops (op_hash) of this trace
  // and of the traces it continues, the same wherever the queue cut them.
  // The adaptive policy tells the trace after it apart by it (0 otherwise).
  uint64_t chain_key = 0;
  bool empty() const { return ops.empty(); }
};

// What an op computes and over which layout: its name, space, views (dtype,
// offset, strides), scalar types and expression; not its scalar values nor
// which buffers it touches (those depend on the program's allocations, not
// on its structure). Equal ops in two runs of a script hash alike.
uint64_t op_hash(const TraceOp& op);

// A process-lifetime copy of `name` ("aten::add.Tensor"), the same pointer
// for equal names: what TraceOp::name points at. Bounded by the distinct op
// names a process records.
const char* intern_op_name(std::string_view name);

}  // namespace kiln::trace
