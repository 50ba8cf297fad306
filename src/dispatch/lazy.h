// Lazy mode (KILN_MODE=lazy): traceable ops are recorded into the device's
// micro-trace instead of launched; the trace is flushed before anything else
// enters the device's queue and at every sync point, so the queue always
// runs work in the order the program issued it.
#pragma once

#include <ATen/core/stack.h>

#include <string_view>
#include <vector>

#include "dispatch/op_info.h"
#include "kiln/runtime.h"

namespace kiln::dispatch {

// Hands the engine its options (from the knobs). Throws what engine::configure throws.
void configure_lazy_mode();

// Compiles and launches what the device recorded; a no-op in eager mode or
// when nothing is pending. `reason` is counted in the metrics. With
// KILN_LAUNCH_BLOCKING a failed launch raises here, as eager's error.
void flush_trace(runtime::Device& dev, std::string_view reason);

// Records the call into the device's micro-trace if the op has a lowering
// and the lowering takes these arguments. `outputs` are the op's results
// (allocated, or the arguments it writes); `fresh[j]` says output j was
// allocated for this call. Returns false when the caller must launch it.
bool try_record(const OpInfo& info, const torch::jit::Stack& stack, size_t first, c10::DeviceIndex index,
                c10::ArrayRef<c10::IValue> outputs, c10::ArrayRef<bool> fresh);

}  // namespace kiln::dispatch
