// Device lookup and the current device, with torch's error messages.
#include "dispatch/backend/devices.h"

#include <c10/util/Exception.h>

#include "dispatch/backend/startup.h"

namespace kiln::dispatch {
namespace {
thread_local c10::DeviceIndex t_current_device = 0;
}  // namespace

std::string device_string(c10::DeviceIndex index) { return settings().device_name + ":" + std::to_string(index); }

c10::DeviceIndex device_count() {
  return is_initialized() ? static_cast<c10::DeviceIndex>(settings().device_count) : 0;
}

c10::DeviceIndex current_device() { return t_current_device; }

runtime::Device& device(c10::DeviceIndex index) {
  TORCH_CHECK(is_initialized(), "kiln is not initialized: import kiln (or torch with autoload on) first");
  TORCH_CHECK(!in_bad_fork(), "Cannot use the ", settings().device_name,
              " device in a forked subprocess: kiln's device queues do not survive fork. "
              "Use the 'spawn' start method (e.g. DataLoader(multiprocessing_context='spawn')).");
  if (index < 0) index = t_current_device;
  TORCH_CHECK(index < settings().device_count, device_string(index),
              " is not a valid device: ", settings().device_count, " device(s) exist, valid are ",
              settings().device_name, ":0..", settings().device_name, ":", settings().device_count - 1,
              " (KILN_DEVICE_COUNT sets how many)");
  return runtime::Runtime::get().device(index);
}

void set_current_device(c10::DeviceIndex index) {
  device(index);  // validates
  t_current_device = index;
}

}  // namespace kiln::dispatch
