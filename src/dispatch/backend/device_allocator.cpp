// The c10::DeviceAllocator of the device: torch's allocator API (and the
// torch.accelerator memory APIs) over the runtime's memory pools.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <array>

#include "dispatch/backend/device_allocator.h"
#include "dispatch/backend/devices.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/sync.h"
#include "dispatch/backend/torch_errors.h"
#include "kiln/metrics.h"
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

thread_local bool t_reuse_held_blocks = false;

// The memory of a storage only the pending trace still holds (its keepalive,
// lazy/lower_context.cpp), taken out of it, or null. Only memory of this
// device's pool qualifies: its deleter is ours, so the new DataPtr can be.
void* take_if_only_the_trace_holds(const std::shared_ptr<void>& keepalive, c10::DeviceIndex index) {
  auto& storage = *static_cast<c10::Storage*>(keepalive.get());
  if (storage.use_count() != 1 || storage.data_ptr().get_deleter() != kDeleters[index]) return nullptr;
  c10::DataPtr old = storage.set_data_ptr(c10::DataPtr(nullptr, storage.device()));
  storage.set_nbytes(0);
  void* memory = old.get();
  (void)old.release_context();  // the new output's DataPtr frees it
  return memory;
}

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex index = current_device();
    runtime::Device& dev = device(index);
    void* ptr = nullptr;
    if (nbytes != 0 && t_reuse_held_blocks && trace::lazy_mode()) {
      ptr = trace::recorder(index).adopt_held_block(nbytes, [&](const std::shared_ptr<void>& keepalive) {
        return take_if_only_the_trace_holds(keepalive, index);
      });
      if (ptr) Metrics::global().add(Counter::BytesReused, "held by a trace", static_cast<int64_t>(nbytes));
    }
    if (nbytes != 0 && ptr == nullptr) {
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

ReuseHeldBlocks::ReuseHeldBlocks() : previous_(t_reuse_held_blocks) { t_reuse_held_blocks = true; }
ReuseHeldBlocks::~ReuseHeldBlocks() { t_reuse_held_blocks = previous_; }

bool allocated_by_device_pool(const c10::Storage& storage) {
  const c10::Device device = storage.device();
  return device.is_privateuseone() && device.index() >= 0 && device.index() < runtime::kMaxDevices &&
         storage.data_ptr().get_deleter() == kDeleters[device.index()];
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace kiln::dispatch
