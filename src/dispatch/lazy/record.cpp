// Lazy mode's entry (see record.h).
#include "dispatch/lazy/record.h"

#include <ATen/Context.h>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/sync.h"
#include "dispatch/lazy/lowering.h"
#include "kiln/engine.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {

Recorded try_record(const OpInfo& info, const torch::jit::Stack& stack, size_t first, c10::DeviceIndex index,
                    c10::ArrayRef<c10::IValue> outputs, c10::ArrayRef<bool> fresh, const MakeLaunch& library_launch) {
  LowerCtx ctx(info.trace_name, stack, first, outputs, fresh);
  try {
    info.lowering(ctx);
    ctx.decline_overlaps();
  } catch (const Decline&) {
    return Recorded::No;
  } catch (const c10::Error&) {
    return Recorded::No;  // an argument the lowering did not expect: eager's kernel decides
  }
  bool as_library = false;
  std::vector<trace::HeldLaunch> dropped;  // after the recorder's lock: they may free device memory
  const size_t pending = trace::recorder(index).record([&](trace::PendingTrace& t) {
    ctx.commit(t);
    if (t.size() == 1) {
      // torch.use_deterministic_algorithms(True): the same tiers whatever the caches hold.
      const bool counts_only = at::globalContext().deterministicAlgorithms();
      const engine::TraceStart start = engine::start_trace(index, t.last(), counts_only);
      t.start(start.key, start.ran_as_library, counts_only, start.hold_until_ops);
    }
    if (t.holds_launches()) {
      if (static_cast<int>(t.size()) < t.hold_until_ops()) t.hold(library_launch());
      else dropped = t.run_fused();
    }
    as_library = t.ran_as_library();
  });
  if (as_library) {
    // After the trace's earlier ops, which were launched as they were
    // recorded: nothing of the trace waits to be launched before it.
    trace::HeldLaunch launch = library_launch();
    launch.count();
    launch_recorded(device(index), launch.name, std::move(launch.work));
  }
  // A library trace's flush launches nothing: this op's own launch, before
  // it, keeps the queue in program order.
  if (static_cast<int64_t>(pending) >= settings().trace_max_ops) flush_trace(device(index), "trace size limit");
  return as_library ? Recorded::AsLibrary : Recorded::Lazily;
}

}  // namespace kiln::dispatch
