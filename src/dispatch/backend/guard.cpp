// DeviceGuardImplInterface for the device: current device, streams and events.
//
// Every stream of a device shares the device's one in-order queue, so stream
// ordering is always kept (and cross-stream waits are already satisfied).
// Stream ids exist so that torch.Stream / torch.accelerator code runs as it
// would on CUDA.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include "dispatch/backend/devices.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/sync.h"
#include "dispatch/backend/torch_errors.h"

namespace kiln::dispatch {
namespace {

constexpr int kMaxStreamsPerDevice = 32;
thread_local c10::StreamId t_current_stream[16] = {};

c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::kPrivateUse1, index), id);
}

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kType, "expected a ", settings().device_name, " device, got ", d);
    set_current_device(d.index() < 0 ? current_device() : d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) {
      try {
        set_current_device(d.index());
      } catch (...) {}
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    auto index = d.index() < 0 ? current_device() : d.index();
    return make_stream(index, t_current_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return make_stream(d.index() < 0 ? current_device() : d.index(), 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    static std::atomic<int> next{0};
    return make_stream(d.index() < 0 ? current_device() : d.index(), 1 + next++ % (kMaxStreamsPerDevice - 1));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool = false) const override { return getNewStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::Stream old = getStream(s.device());
    t_current_stream[s.device_index()] = s.id();
    return old;
  }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  // ---- events: a runtime::Event owned through the void* handle
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<runtime::Event*>(event);
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex index,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = new runtime::Event();
    flush_trace(device(stream.device_index()), "event record");  // the event marks pending ops too
    device(stream.device_index()).record(*static_cast<runtime::Event*>(*event));
  }
  void block(void* event, const c10::Stream& stream) const override {
    // Same queue for every stream of a device: ordering already holds. Across
    // devices, wait for the event on the host.
    auto* e = static_cast<runtime::Event*>(event);
    if (e != nullptr && e->recorded() && e->device() != stream.device_index()) e->synchronize();
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || static_cast<runtime::Event*>(event)->query();
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) static_cast<runtime::Event*>(event)->synchronize();
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "elapsed_time needs both events recorded");
    return with_torch_errors([&] {
      try {
        return runtime::Event::elapsed_ms(*static_cast<runtime::Event*>(start), *static_cast<runtime::Event*>(end));
      } catch (const std::invalid_argument& e) {
        TORCH_CHECK(false, e.what());
      }
    });
  }

  // ---- streams
  bool queryStream(const c10::Stream& stream) const override {
    runtime::Device& dev = device(stream.device_index());
    flush_trace(dev, "stream query");  // pending ops would otherwise never finish
    return dev.idle();
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize(device(stream.device_index()), "stream synchronize");
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize(device(index), "device synchronize");
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace kiln::dispatch
