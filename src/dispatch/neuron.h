// Shared plumbing of the dispatch layer: settings, device lookup, waits, and
// the device-tensor helpers every kernel file uses.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include "kiln/knobs.h"
#include "kiln/metrics.h"
#include "kiln/runtime.h"

namespace kiln::dispatch {

// Parses the knobs and starts the runtime. Throws KnobError (a bad knob) —
// called by the Python module's _init() so the error surfaces at import.
void initialize();
bool is_initialized();
const Settings& settings();

// Switches KILN_MODE at run time (kiln.set_mode): flushes what every device
// recorded first, so nothing recorded under one mode is left behind.
void set_lazy_mode(bool lazy);

// The device behind `index` (-1 = current). Raises a c10 error naming the
// index and the valid range when out of range, or when kiln is not initialized
// or the process is a fork child.
runtime::Device& device(c10::DeviceIndex index);
c10::DeviceIndex device_count();
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
std::string device_string(c10::DeviceIndex index);  // "neuron:0"

// Waits for every launch on the device and delivers its pending error as a
// c10::Error. Releases the GIL while waiting. `reason` is counted as a sync point.
void synchronize(runtime::Device& dev, std::string_view reason);

// synchronize() without the flush: what the flush itself calls under
// KILN_LAUNCH_BLOCKING=1 (a flush that synchronized would flush again).
void wait_for_launches(runtime::Device& dev, std::string_view reason);

// Submits `work` to the device's queue as one launch named `name` (counted in
// the metrics). With KILN_LAUNCH_BLOCKING=1 waits for it and raises its error.
void enqueue(runtime::Device& dev, std::string_view name, runtime::LaunchQueue::Work work);

// Converts runtime errors (launch failures, out of memory) thrown by `fn` into
// the c10 errors PyTorch users expect.
template <class F>
decltype(auto) with_torch_errors(F&& fn);

// A device tensor with the given geometry, allocated from the device's pool.
at::Tensor empty_device(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        c10::DeviceIndex index);

// Grows (or shrinks) a device storage to `nbytes`, keeping its contents.
// Waits for the device first: pending launches may still use the old bytes.
void resize_device_storage(const c10::Storage& storage, size_t nbytes);

// A CPU tensor viewing the same bytes as `t` (a device tensor): same sizes,
// strides, offset, conj/neg bits. Valid while the device memory is.
at::Tensor host_alias(const at::Tensor& t);

// Set once in a forked child: the device's worker threads did not survive.
bool in_bad_fork();

// Logging to stderr for an enabled KILN_LOG channel.
void log(const char* channel, const std::string& message);

[[noreturn]] void rethrow_as_torch_error(const std::exception& e);

template <class F>
decltype(auto) with_torch_errors(F&& fn) {
  try {
    return fn();
  } catch (const c10::Error&) {
    throw;
  } catch (const runtime::OutOfMemoryError& e) {
    rethrow_as_torch_error(e);
  } catch (const runtime::LaunchError& e) {
    rethrow_as_torch_error(e);
  }
}

}  // namespace kiln::dispatch
