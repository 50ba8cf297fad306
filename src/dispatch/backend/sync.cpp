// Sync points, flushes and untraced launches (see sync.h).
#include "dispatch/backend/sync.h"

#include <ATen/ThreadLocalState.h>
#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <vector>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/torch_errors.h"
#include "kiln/engine.h"
#include "kiln/metrics.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {

void flush_trace(runtime::Device& dev, std::string_view reason, bool cut) {
  if (!trace::lazy_mode()) return;
  const bool chain = settings().queue_low_watermark > 0;  // the engine tells traces apart by Trace::chain_key
  std::string failure;
  delivering_launch_errors(reason, [&] {
    try {
      trace::recorder(dev.index()).flush([&](const trace::Trace& t) { engine::flush(dev, t, reason); }, cut, chain);
    } catch (const runtime::LaunchError&) {
      throw;  // a blocking launch failed: eager's error, at the op
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  TORCH_CHECK(failure.empty(), "kiln: running the ops recorded on ", device_string(dev.index()), " since the last ",
              "sync failed: ", failure, ". This is a kiln bug; KILN_MODE=eager runs every op on its own.");
  warn_about_the_engine();  // a corrupt cache entry, a cache that could not be written
}

void synchronize(runtime::Device& dev, std::string_view reason) {
  synchronize_for_host_run(dev, reason);
  if (trace::lazy_mode()) engine::program_waited(dev.index());
}

void synchronize_for_host_run(runtime::Device& dev, std::string_view reason) {
  flush_trace(dev, reason);
  wait_for_launches(dev, reason);
}

void wait_for_launches(runtime::Device& dev, std::string_view reason) {
  Metrics::global().add(Counter::SyncPoints, reason);
  delivering_launch_errors(reason, [&] { dev.synchronize(); });
}

void run_on_worker(runtime::Device& dev, std::string_view name, const std::function<void()>& host_work) {
  if (dev.on_worker()) {
    host_work();
    return;
  }
  HeldWarnings warnings;
  std::exception_ptr failed;
  const at::ThreadLocalState caller_state;
  launch_recorded(dev, name, [&] {
    const at::ThreadLocalStateGuard state(caller_state);
    const c10::WarningUtils::WarningHandlerGuard held(&warnings);
    try {
      host_work();
    } catch (...) {
      failed = std::current_exception();
    }
  });
  runtime::Event done;
  dev.record(done);
  done.synchronize();  // through the runtime's host wait: lets go of the GIL
  warnings.release();
  if (failed) std::rethrow_exception(failed);
}

void enqueue(runtime::Device& dev, std::string_view name, runtime::LaunchQueue::Work work) {
  flush_trace(dev, "untraced op");  // what the program issued before this runs before it
  launch_recorded(dev, name, std::move(work));
}

void launch_recorded(runtime::Device& dev, std::string_view name, runtime::LaunchQueue::Work work) {
  // What the work throws reaches the next sync point as a LaunchError
  // carrying it (rethrow_launch_error gives it back its type); with
  // KILN_LAUNCH_BLOCKING the device raises it here.
  delivering_launch_errors("launch blocking", [&] { dev.launch(std::string(name), std::move(work)); });
}

}  // namespace kiln::dispatch
