// Pinned host memory for pin_memory(): page-aligned host blocks the device
// knows as pinned. (A real accelerator would page-lock them.)
#include <ATen/core/CachingHostAllocator.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "dispatch/backend/pinned_memory.h"

namespace kiln::dispatch {
namespace {

class PinnedHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return {nullptr, nullptr, nullptr, c10::Device(c10::kCPU)};
    void* ptr = std::aligned_alloc(4096, (nbytes + 4095) / 4096 * 4096);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "kiln: cannot allocate ", nbytes,
                     " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.insert(ptr);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(nbytes);
    }
    return {ptr, ptr, &PinnedHostAllocator::release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &PinnedHostAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    at::HostStats s;
    s.allocations = stats_.allocations;
    s.allocated_bytes = stats_.allocated_bytes;
    return s;
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}

  bool is_pinned(const void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.count(const_cast<void*>(ptr)) != 0;
  }

 private:
  static void release(void* ptr);
  std::mutex mu_;
  std::unordered_set<void*> live_;
  struct {
    c10::CachingAllocator::Stat allocations;
    c10::CachingAllocator::Stat allocated_bytes;
  } stats_;
  friend bool is_pinned_host_ptr(const void* ptr);
};

PinnedHostAllocator g_pinned;

void PinnedHostAllocator::release(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned.mu_);
    g_pinned.live_.erase(ptr);
  }
  std::free(ptr);
}

}  // namespace

at::Allocator* pinned_host_allocator() { return &g_pinned; }
bool is_pinned_host_ptr(const void* ptr) { return g_pinned.is_pinned(ptr); }

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_pinned);

}  // namespace kiln::dispatch
