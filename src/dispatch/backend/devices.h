// The devices as torch sees them: index checks, the current device, names.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "kiln/runtime.h"

namespace kiln::dispatch {

// The device behind `index` (-1 = current). Raises a c10 error naming the
// index and the valid range when out of range, or when kiln is not initialized
// or the process is a fork child.
runtime::Device& device(c10::DeviceIndex index);
c10::DeviceIndex device_count();
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
std::string device_string(c10::DeviceIndex index);  // "neuron:0"

}  // namespace kiln::dispatch
