// Lazy mode's entry (KILN_MODE=lazy): a traceable call is lowered into a
// TraceOp and recorded into the device's micro-trace instead of launched;
// the trace is flushed before anything else enters the device's queue and
// at every sync point (backend/sync.h), so the queue always runs work in
// the order the program issued it.
#pragma once

#include <ATen/core/stack.h>

#include <functional>

#include "dispatch/eager/op_info.h"
#include "kiln/trace.h"

namespace kiln::dispatch {

enum class Recorded {
  No,         // the lowering declined: the caller launches it
  Lazily,     // pending in the trace, for a fused flush (its library launch held until then: Trace::hold_until_ops)
  AsLibrary,  // in a trace of the library tier: launched by try_record
};

// The op's library kernel as a launch (not yet counted in the metrics).
using MakeLaunch = std::function<trace::HeldLaunch()>;

// Records the call into the device's micro-trace if the lowering takes these
// arguments (the caller checked that the mode is lazy and the op has a
// lowering). `outputs` are the op's results (allocated, or the arguments it
// writes); `fresh[j]` says output j was allocated for this call. The first
// op of a trace asks the engine's adaptive policy whether the trace runs as
// library kernels (engine::start_trace); in one that does, the op's
// `library_launch` is launched at once, or held by the trace until its
// flush (a large first op: Trace::hold_until_ops).
Recorded try_record(const OpInfo& info, const torch::jit::Stack& stack, size_t first, c10::DeviceIndex index,
                    c10::ArrayRef<c10::IValue> outputs, c10::ArrayRef<bool> fresh, const MakeLaunch& library_launch);

}  // namespace kiln::dispatch
