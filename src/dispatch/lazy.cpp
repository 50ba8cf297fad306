// Per-device recorders and the flush (see lazy.h).
#include "dispatch/lazy.h"

#include "dispatch/lowering.h"
#include "dispatch/neuron.h"
#include "kiln/engine.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {

void configure_lazy_mode() {
  const Settings& s = settings();
  engine::Options o;
  o.fusion.max_ops = s.fusion_max_ops;
  o.fusion.stream_min_bytes = s.stream_min_mb << 20;
  o.codegen.fast_math = s.fast_math;
  o.num_threads = s.num_threads;
  o.dump_dir = s.dump_dir;
  o.log_enabled = [](const char* channel) { return settings().log_enabled(channel); };
  o.log = [](const char* channel, const std::string& message) { log(channel, message); };
  engine::configure(o);
}

void flush_trace(runtime::Device& dev, std::string_view reason) {
  if (!trace::lazy_mode()) return;
  std::string failure;
  delivering_launch_errors(reason, [&] {
    try {
      trace::recorder(dev.index()).flush([&](const trace::Trace& t) { engine::flush(dev, t, reason); });
    } catch (const runtime::LaunchError&) {
      throw;  // a blocking launch failed: eager's error, at the op
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  TORCH_CHECK(failure.empty(), "kiln: running the ops recorded on ", device_string(dev.index()), " since the last ",
              "sync failed: ", failure, ". This is a kiln bug; KILN_MODE=eager runs every op on its own.");
}

bool try_record(const OpInfo& info, const torch::jit::Stack& stack, size_t first, c10::DeviceIndex index,
                c10::ArrayRef<c10::IValue> outputs, c10::ArrayRef<bool> fresh) {
  if (!trace::lazy_mode() || info.lowering == nullptr) return false;
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
