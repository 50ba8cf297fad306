// The c10::DeviceAllocator of the device: torch's allocator API (and the
// torch.accelerator memory APIs) over the runtime's memory pools.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <array>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/sync.h"
#include "dispatch/backend/torch_errors.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {
namespace {

// One deleter per device index, so a DataPtr needs no heap context. The
// recorder sees the free first: a pending output freed before the flush is
// never written.
template <int D>
void delete_on_device(void* ptr) {
  trace::recorder(D).free(ptr);
}
template <int... Ds>
constexpr std::array<c10::DeleterFnPtr, sizeof...(Ds)> make_deleters(std::integer_sequence<int, Ds...>) {
  return {&delete_on_device<Ds>...};
}
constexpr auto kDeleters = make_deleters(std::make_integer_sequence<int, runtime::kMaxDevices>{});

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::Stat;
using c10::CachingDeviceAllocator::StatType;

void set_stat(Stat& stat, int64_t current, int64_t peak, int64_t allocated, int64_t freed) {
  stat.current = current;
  stat.peak = peak;
  stat.allocated = allocated;
  stat.freed = freed;
}

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex index = current_device();
    runtime::Device& dev = device(index);
    void* ptr = nullptr;
    if (nbytes != 0) {
      ptr = with_torch_errors([&] { return dev.allocate(nbytes); });
    }
    return {ptr, ptr, nbytes != 0 ? kDeleters[index] : nullptr, c10::Device(c10::kPrivateUse1, index)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // A storage copy (StorageImpl clone): ordered on the destination's queue.
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      runtime::Device& dev = device(i);
      if (dev.memory().owns(dest)) {
        with_torch_errors([&] { dev.copy_on_device(dest, src, count); });
        return;
      }
    }
    TORCH_CHECK(false, "kiln: copy_data into ", dest, ", which is not memory of a ", settings().device_name, " device");
  }

  bool initialized() override { return is_initialized(); }

  void emptyCache(c10::MempoolId_t) override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      runtime::Device& dev = device(i);
      synchronize(dev, "empty_cache");
      dev.memory().empty_cache();
    }
  }

  void recordStream(const c10::DataPtr&, c10::Stream) override {
    // Every stream of a device shares its one in-order queue, so a block's
    // next owner's launches run after every launch that used it: nothing to
    // record.
  }

  DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    runtime::MemoryStats s = device(index).memory().stats();
    DeviceStats out;
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    // One pool, no splitting: active equals allocated, every block is its
    // own segment, and nothing is inactive.
    set_stat(out.allocated_bytes[agg], s.allocated_bytes, s.peak_allocated_bytes, s.allocated_bytes_total,
             s.freed_bytes_total);
    set_stat(out.active_bytes[agg], s.allocated_bytes, s.peak_allocated_bytes, s.allocated_bytes_total,
             s.freed_bytes_total);
    set_stat(out.requested_bytes[agg], s.requested_bytes, s.peak_requested_bytes, s.requested_bytes_total,
             s.requested_freed_bytes_total);
    set_stat(out.reserved_bytes[agg], s.reserved_bytes, s.peak_reserved_bytes, s.reserved_bytes_total,
             s.released_bytes_total);
    set_stat(out.allocation[agg], s.live_allocations, s.peak_live_allocations, s.allocation_count, s.free_count);
    set_stat(out.active[agg], s.live_allocations, s.peak_live_allocations, s.allocation_count, s.free_count);
    out.num_ooms = s.oom_count;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex index) override { device(index).memory().reset_accumulated_stats(); }

  void resetPeakStats(c10::DeviceIndex index) override { device(index).memory().reset_peak_stats(); }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    runtime::MemoryStats s = device(index).memory().stats();
    return {static_cast<size_t>(s.capacity_bytes - s.allocated_bytes), static_cast<size_t>(s.capacity_bytes)};
  }
};

NeuronDeviceAllocator g_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace kiln::dispatch
