// Fusion: partitions a micro-trace into regions and turns each region into
// one kernel. Plain C++ over trace::Trace; no torch, no LLVM.
//
// The rules that decide the regions are stated once, numbered, each with
// the test that pins it, in docs/fusion.md ("Fusion rules"); the code cites
// them by number where it implements them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernel_ir.h"
#include "kiln/trace.h"

namespace kiln::fusion {

struct Options {
  // KILN_FUSION_MAX_OPS (rule 8). Plans made without the knobs (tests, the
  // compiler warm-up) get its default; test Engine.OptionsFollowTheKnobs pins it.
  int max_ops = 64;
  // A kernel that can_stream_stores and stores at least this many bytes per
  // launch streams them (ir::Kernel::streaming_stores); 0: never.
  int64_t stream_min_bytes = 0;  // KILN_STREAM_MIN_MB
};

struct Region {
  std::vector<int32_t> ops;    // trace op indices, in trace order (one component's: rule 9)
  std::vector<int64_t> sizes;  // iteration space
  uint64_t reduced = 0;
  std::string ended_by;  // why the next op did not join (docs/fusion.md; "end of trace" for the last)
};

// A kernel ready to compile (kernel) and to launch (the rest).
struct PlannedKernel {
  ir::Kernel kernel;
  std::vector<int32_t> buffer_ids;  // trace buffer of each pointer slot
  std::vector<int64_t> ints;        // LaunchArgs::ints, in the kernel's layout
  std::vector<double> scalars;      // LaunchArgs::scalars
  // LaunchArgs::work and unit_elements: the product of the kept sizes
  // (elements of a pointwise kernel, rows of a row kernel) and of the
  // reduced ones (a row's length; 1 for a pointwise kernel).
  int64_t work = 0;
  int64_t unit_elements = 1;
  int32_t region = 0;
  // Where each kernel scalar slot's value comes from (trace.ops[op].scalars
  // [index]): a plan reused for a trace of the same structure takes the new
  // trace's values (bind_scalars).
  struct ScalarRef {
    int32_t op = 0, index = 0;
  };
  std::vector<ScalarRef> scalar_refs;
};

struct Plan {
  std::vector<Region> regions;
  std::vector<PlannedKernel> kernels;  // launch order; a region whose every store was dropped has none (rule 11)
  // A dead buffer a later region reads: it needs memory from the launch of
  // the first kernel that names it (its writer) to that of the last.
  struct Scratch {
    int32_t buffer = 0;
    int32_t first_kernel = 0, last_kernel = 0;  // indices into kernels
    bool operator==(const Scratch&) const = default;
  };
  std::vector<Scratch> scratch;
  int64_t bytes_not_written = 0;  // stores dropped because their buffer died
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
