// PrivateUse1HooksInterface: what ATen and autograd ask of any accelerator.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/generator.h"
#include "dispatch/backend/hooks.h"
#include "dispatch/backend/pinned_memory.h"
#include "dispatch/backend/startup.h"
#include "dispatch/eager/device_tensors.h"

namespace kiln::dispatch {
namespace {

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return is_initialized() && device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override { return is_initialized(); }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = current_device();
    if (index >= 0) set_current_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_host_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_host_allocator(); }
  at::Device getDeviceFromPtr(void* data) const override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      if (device(i).memory().owns(data)) return at::Device(c10::kPrivateUse1, i);
    }
    TORCH_CHECK(false, "pointer ", data, " is not device memory of ", settings().device_name);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override { return default_generator(index); }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override { return new_generator(index); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_device_storage(storage, newsize);
  }
};

}  // namespace

void register_hooks() {
  static bool done = false;
  if (!done) {
    at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
    done = true;
  }
}

}  // namespace kiln::dispatch
