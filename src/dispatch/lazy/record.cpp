// Lazy mode's entry (see record.h).
#include "dispatch/lazy/record.h"

#include "dispatch/backend/devices.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/sync.h"
#include "dispatch/lazy/lowering.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {

bool try_record(const OpInfo& info, const torch::jit::Stack& stack, size_t first, c10::DeviceIndex index,
                c10::ArrayRef<c10::IValue> outputs, c10::ArrayRef<bool> fresh) {
  LowerCtx ctx(info.trace_name, stack, first, outputs, fresh);
  try {
    info.lowering(ctx);
    ctx.decline_overlaps();
  } catch (const Decline&) {
    return false;
  } catch (const c10::Error&) {
    return false;  // an argument the lowering did not expect: eager's kernel decides
  }
  const size_t pending = trace::recorder(index).record([&](trace::PendingTrace& t) { ctx.commit(t); });
  if (static_cast<int64_t>(pending) >= settings().trace_max_ops) flush_trace(device(index), "trace size limit");
  return true;
}

}  // namespace kiln::dispatch
