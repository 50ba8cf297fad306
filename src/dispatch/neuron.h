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

// synchronize() without the flush.
void wait_for_launches(runtime::Device& dev, std::string_view reason);

// Flushes the trace, then launches `work` on the device as one launch named
// `name`. With KILN_LAUNCH_BLOCKING=1 the device waits for it and its error
// raises here.
void enqueue(runtime::Device& dev, std::string_view name, runtime::LaunchQueue::Work work);

// Runs `fn`, which may deliver a device's launch error (a sync point, a
// blocking launch): the error is counted and logged under `reason`, and
// raised as the c10 error eager would raise.
template <class F>
decltype(auto) delivering_launch_errors(std::string_view reason, F&& fn);

// Converts runtime errors (launch failures, out of memory) thrown by `fn` into
// the c10 errors PyTorch users expect.
template <class F>
decltype(auto) with_torch_errors(F&& fn);

// A device tensor with the given geometry, allocated from the device's pool.
at::Tensor empty_device(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        c10::DeviceIndex index);

// Copies CPU tensor `src` into device tensor `dst` (broadcast and dtype
// conversion as copy_ does) through the device's host-to-device copy, after
// what the device recorded. The caller may change `src` at once.
void copy_host_to_device(const at::Tensor& src, const at::Tensor& dst);

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
void count_delivered_error(const runtime::LaunchError& e, std::string_view reason);

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

template <class F>
decltype(auto) delivering_launch_errors(std::string_view reason, F&& fn) {
  return with_torch_errors([&]() -> decltype(auto) {
    try {
      return fn();
    } catch (const runtime::LaunchError& e) {
      count_delivered_error(e, reason);
      throw;
    }
  });
}

}  // namespace kiln::dispatch
