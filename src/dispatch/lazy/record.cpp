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

namespace {

// KILN_QUEUE_LOW_WATERMARK: whether the device's queue holds fewer launches
// than the watermark while a fused trace of at least as many ops waits, so
// that its ops go to the device now rather than at the next sync. (A
// library-tier trace was launched as it was recorded; a trace that holds its
// first op's launch would change tier if cut.) The cut trace and the one
// that continues it are fused as the whole would have been, and fused
// results do not depend on where kernels split: the cut changes timing,
// never bits.
bool queue_ran_low(c10::DeviceIndex index, size_t pending, bool launched_or_held) {
  const int64_t watermark = settings().queue_low_watermark;
  if (watermark <= 0 || launched_or_held || static_cast<int64_t>(pending) < watermark) return false;
  return static_cast<int64_t>(device(index).queued()) < watermark;
}

}  // namespace

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
  bool as_library = false, holds = false;
  size_t in_chain = 0;
  std::vector<trace::HeldLaunch> dropped;  // after the recorder's lock: they may free device memory
  const size_t pending = trace::recorder(index).record([&](trace::PendingTrace& t) {
    ctx.commit(t);
    if (t.size() == 1) {
      if (const auto cut = t.take_continuation()) {
        // The trace before was cut where the queue ran low: this one goes on
        // as that trace would have, fused, so that no result depends on timing.
        t.start(cut->start_key, /*ran_as_library=*/false, cut->counts_only, /*hold_until_ops=*/0);
      } else {
        // torch.use_deterministic_algorithms(True): the same tiers whatever the caches hold.
        const bool counts_only = at::globalContext().deterministicAlgorithms();
        const engine::TraceStart start = engine::start_trace(index, t.last(), counts_only);
        t.start(start.key, start.ran_as_library, counts_only, start.hold_until_ops);
      }
    }
    if (t.holds_launches()) {
      if (static_cast<int>(t.size()) < t.hold_until_ops()) t.hold(library_launch());
      else dropped = t.run_fused();
    }
    as_library = t.ran_as_library();
    holds = t.holds_launches();
    in_chain = t.ops_in_chain();
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
  // The size limit counts across cuts, so that it falls where it would
  // without them.
  if (static_cast<int64_t>(in_chain) >= settings().trace_max_ops) {
    flush_trace(device(index), "trace size limit");
  } else if (queue_ran_low(index, pending, as_library || holds)) {
    flush_trace(device(index), "device queue low", /*cut=*/true);
  }
  return as_library ? Recorded::AsLibrary : Recorded::Lazily;
}

}  // namespace kiln::dispatch
