// Fusion: partitions a micro-trace into regions and turns each region into
// one kernel. Plain C++ over trace::Trace; no torch, no LLVM.
//
// Rules (docs/fusion.md lists each with the test that pins it):
//  - Ops are taken one buffer-sharing component at a time (components in the
//    order they first appear, each in trace order): ops of different
//    components share no buffer, so they commute, and a trace that
//    interleaves them (a foreach optimizer step: every parameter's first op,
//    then every parameter's second, ...) is regrouped per component.
//  - A region is a run of such ops over one iteration space: pointwise
//    ops over the same shape fuse vertically (chains) and horizontally
//    (siblings, as one multi-output kernel).
//  - A reduction joins a region over its input's shape; pointwise ops over the
//    reduced shape (row-level) and over the full shape after it (epilogue)
//    join too, so softmax and LayerNorm are one row kernel.
//  - A value written in the region and read back through the same view is
//    forwarded in registers; read or written through a different,
//    overlapping view, the region ends (eager order is kept across regions).
//    Views with the same strides whose blocks land apart (the gate blocks
//    of one [batch, 4 * hidden] buffer) do not overlap.
//  - Float sin and cos do not share a kernel with a reduction: only
//    pointwise kernels can redo a run whose arguments are too large for the
//    float reduction.
//  - An op linked to the region by no chain of shared buffers (anywhere in
//    the trace) starts a new one: fusing independent work adds memory
//    streams and compile time and saves nothing.
//  - A region holds at most Options::max_ops ops.
//  - Stores to buffers freed before the flush are dropped, unless a later
//    region reads them from memory: then they get scratch memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernel_ir.h"
#include "kiln/trace.h"

namespace kiln::fusion {

struct Options {
  int max_ops = 64;  // KILN_FUSION_MAX_OPS
  // A kernel that can_stream_stores and stores at least this many bytes per
  // launch streams them (ir::Kernel::streaming_stores); 0: never.
  int64_t stream_min_bytes = 0;  // KILN_STREAM_MIN_MB
};

struct Region {
  std::vector<int32_t> ops;    // trace op indices, in trace order (one component's)
  std::vector<int64_t> sizes;  // iteration space
  uint64_t reduced = 0;
  std::string ended_by;  // why the next op did not join ("end of trace" for the last)
};

// A kernel ready to compile (kernel) and to launch (the rest).
struct PlannedKernel {
  ir::Kernel kernel;
  std::vector<int32_t> buffer_ids;  // trace buffer of each pointer slot
  std::vector<int64_t> ints;        // LaunchArgs::ints
  std::vector<double> scalars;      // LaunchArgs::scalars
  int64_t work = 0;                 // elements (pointwise) or rows (row kernel)
  int32_t region = 0;
  // Where each kernel scalar slot's value comes from (trace.ops[op].scalar_f /
  // scalar_i [index]): a plan reused for a trace of the same structure takes
  // the new trace's values (bind_scalars).
  struct ScalarRef {
    int32_t op = 0, index = 0;
  };
  std::vector<ScalarRef> scalar_refs;
};

struct Plan {
  std::vector<Region> regions;
  std::vector<PlannedKernel> kernels;  // launch order; a region whose every store was dropped has none
  std::vector<int32_t> scratch;        // dead buffers a later region reads: give them scratch memory
  int64_t bytes_not_written = 0;       // stores dropped because their buffer died
};

Plan plan(const trace::Trace& trace, const Options& options);

// Everything plan() reads, except the values of scalars: two traces with the
// same signature (and options) get the same plan, up to bind_scalars. The
// engine hashes it to reuse plans across flushes of a steady-state loop.
std::string plan_signature(const trace::Trace& trace, const Options& options);

// `ints` and `scalars` start as copies of the kernel's; the scalar slots get
// the values of `trace`, a trace with the signature the plan was made for.
void bind_scalars(const PlannedKernel& kernel, const trace::Trace& trace, std::vector<int64_t>& ints,
                  std::vector<double>& scalars);

}  // namespace kiln::fusion
