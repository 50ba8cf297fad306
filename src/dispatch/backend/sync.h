// Sync points and the launch of untraced work: the order of a device's
// queue is the order the program issued its ops in, because what the device
// recorded is flushed before anything else enters the queue.
#pragma once

#include <functional>
#include <string_view>

#include "kiln/runtime.h"

namespace kiln::dispatch {

// Compiles and launches what the device recorded; a no-op in eager mode or
// when nothing is pending. `reason` is counted in the metrics. With
// KILN_LAUNCH_BLOCKING a failed launch raises here, as eager's error.
// `cut`: the device's queue ran low (KILN_QUEUE_LOW_WATERMARK) and the next
// trace continues this one (trace::PendingTrace::Continuation).
void flush_trace(runtime::Device& dev, std::string_view reason, bool cut = false);

// Flushes, waits for every launch on the device and delivers its pending
// error as a c10::Error (the GIL is released while waiting). `reason` is
// counted as a sync point. The program's wait: the adaptive policy counts
// it (engine::program_waited).
void synchronize(runtime::Device& dev, std::string_view reason);

// synchronize() for an op kiln runs on the host (its inputs must be
// computed): kiln's own wait, not one the program asked for.
void synchronize_for_host_run(runtime::Device& dev, std::string_view reason);

// synchronize() without the flush.
void wait_for_launches(runtime::Device& dev, std::string_view reason);

// Flushes, then launches `work` on the device as one launch named `name`.
// With KILN_LAUNCH_BLOCKING=1 the device waits for it and its error raises
// here.
void enqueue(runtime::Device& dev, std::string_view name, runtime::LaunchQueue::Work work);

// Runs `host_work` (a CPU kernel over host aliases of device memory) on the
// device's worker after everything queued before it, and waits for it: the
// device's ATen work stays on one thread and its one OpenMP team
// (host_threads.h). It runs under the calling thread's thread-local state
// (grad mode, dispatch keys, Python modes); its warnings are raised and its
// exception rethrown here, as they were. On the worker itself it runs in
// place.
void run_on_worker(runtime::Device& dev, std::string_view name, const std::function<void()>& host_work);

// enqueue() without the flush: for an op recorded into a trace of the
// library tier, whose earlier ops were launched as they were recorded
// (nothing of the trace waits to be launched before it).
void launch_recorded(runtime::Device& dev, std::string_view name, runtime::LaunchQueue::Work work);

}  // namespace kiln::dispatch
