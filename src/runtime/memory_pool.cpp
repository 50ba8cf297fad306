// Device memory pool: a capacity-bounded caching allocator.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "kiln/runtime.h"

namespace kiln::runtime {

namespace {
std::string oom_message(int device, size_t requested, size_t free_bytes, size_t capacity) {
  std::ostringstream os;
  os << "kiln device " << device << " is out of memory: tried to allocate " << requested << " bytes ("
     << (requested >> 20) << " MiB) with " << free_bytes << " bytes (" << (free_bytes >> 20)
     << " MiB) free of a capacity of " << capacity << " bytes (" << (capacity >> 20)
     << " MiB). Free tensors or raise KILN_DEVICE_MEMORY_MB.";
  return os.str();
}
size_t round_up(size_t bytes) {
  size_t g = MemoryPool::kGranularity;
  // Saturate instead of wrapping to 0 for requests near SIZE_MAX: such a size
  // can never fit, and must fail the capacity check rather than pass it.
  if (bytes > SIZE_MAX - (g - 1)) return SIZE_MAX / g * g;
  return bytes == 0 ? g : (bytes + g - 1) / g * g;
}

// A fresh block of `size` bytes, or nullptr. A block of a huge page or more
// starts at a huge page and asks the kernel to back it with huge pages
// (transparent huge pages, where the system enables them: "always" or
// "madvise"): its first touch then faults once per 2 MiB instead of once per
// 4 KiB, and its kernels miss the TLB less. A large-tensor program's first
// step is mostly the first touches of fresh blocks (docs/architecture.md,
// "Device memory"). Only the whole huge pages of a block are advised; its
// tail keeps small pages.
void* new_block(size_t size) {
  constexpr size_t kHugePage = size_t{2} << 20;
  void* ptr = nullptr;
  if (size < kHugePage) return posix_memalign(&ptr, MemoryPool::kAlignment, size) == 0 ? ptr : nullptr;
  if (posix_memalign(&ptr, kHugePage, size) != 0) return nullptr;
  madvise(ptr, size / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice: on failure the block keeps small pages
  return ptr;
}

// The largest cached block a request of `size` (rounded) takes. A program
// whose sizes change (a sequence of a new length each call) then reuses
// the blocks a longer one freed: a fresh block's every page faults and is
// zeroed at its first touch, while a cached one is mapped already. At most
// twice the request, so that a small request does not hold a large block
// a later large request would have taken.
size_t reuse_limit(size_t size) { return size > SIZE_MAX / 2 ? SIZE_MAX : size * 2; }
}  // namespace

OutOfMemoryError::OutOfMemoryError(int device, size_t requested, size_t free_bytes, size_t capacity)
    : std::runtime_error(oom_message(device, requested, free_bytes, capacity)),
      device(device),
      requested(requested),
      free_bytes(free_bytes),
      capacity(capacity) {}

MemoryPool::MemoryPool(int device, size_t capacity_bytes) : device_(device), capacity_(capacity_bytes) {
  stats_.capacity_bytes = static_cast<int64_t>(capacity_bytes);
}

MemoryPool::~MemoryPool() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
  for (auto& [ptr, block] : live_) std::free(ptr);
}

void* MemoryPool::allocate(size_t bytes) {
  const size_t size = round_up(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* ptr = nullptr;
  size_t block_size = size;
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first <= reuse_limit(size)) {
    block_size = it->first;
    ptr = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) cached_.erase(it);
    if (!prefilled_.empty()) {
      if (auto p = prefilled_.find(ptr); p != prefilled_.end()) {
        prefill_stats_.used_bytes += static_cast<int64_t>(p->second);
        prefilled_.erase(p);
      }
    }
  } else {
    // reserved <= capacity always holds; compare without risking overflow.
    if (size > capacity_ - static_cast<size_t>(stats_.reserved_bytes)) release_cached_locked();
    if (size > capacity_ - static_cast<size_t>(stats_.reserved_bytes)) {
      stats_.oom_count++;
      throw OutOfMemoryError(device_, bytes, capacity_ - stats_.allocated_bytes, capacity_);
    }
    ptr = new_block(size);
    if (ptr == nullptr) {
      stats_.oom_count++;
      throw OutOfMemoryError(device_, bytes, capacity_ - stats_.allocated_bytes, capacity_);
    }
    stats_.reserved_bytes += size;
    stats_.reserved_bytes_total += size;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  live_.emplace(ptr, Block{block_size, size, bytes});
  SizeUse& use = use_by_size_.try_emplace(block_size, SizeUse{0, 0, use_by_size_.size()}).first->second;
  use.peak = std::max(use.peak, ++use.live);
  MemoryStats& s = stats_;
  s.allocated_bytes += size;
  s.requested_bytes += bytes;
  s.live_allocations++;
  s.peak_allocated_bytes = std::max(s.peak_allocated_bytes, s.allocated_bytes);
  s.peak_requested_bytes = std::max(s.peak_requested_bytes, s.requested_bytes);
  s.peak_live_allocations = std::max(s.peak_live_allocations, s.live_allocations);
  s.allocation_count++;
  s.allocated_bytes_total += size;
  s.requested_bytes_total += bytes;
  return ptr;
}

void MemoryPool::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw std::invalid_argument("kiln device " + std::to_string(device_) +
                                ": free of a pointer this pool did not allocate");
  }
  const Block block = it->second;
  live_.erase(it);
  use_by_size_[block.size].live--;
  stats_.allocated_bytes -= block.rounded;
  stats_.requested_bytes -= block.requested;
  stats_.live_allocations--;
  stats_.free_count++;
  stats_.freed_bytes_total += block.rounded;
  stats_.requested_freed_bytes_total += block.requested;
  cached_[block.size].push_back(ptr);
}

void MemoryPool::release_cached_locked() {
  for (auto& [size, blocks] : cached_) {
    for (void* p : blocks) std::free(p);
    stats_.reserved_bytes -= static_cast<int64_t>(size * blocks.size());
    stats_.released_bytes_total += static_cast<int64_t>(size * blocks.size());
  }
  cached_.clear();
  prefilled_.clear();
}

std::vector<MemoryPool::BlockCount> MemoryPool::needed_blocks() const {
  std::vector<std::pair<size_t, BlockCount>> ordered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [size, use] : use_by_size_) ordered.push_back({use.first_use, BlockCount{size, use.peak}});
  }
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<BlockCount> out;
  for (const auto& [order, blocks] : ordered) out.push_back(blocks);
  return out;
}

size_t MemoryPool::prefill(const std::vector<BlockCount>& blocks, size_t max_bytes, const std::atomic<bool>& stop) {
  constexpr size_t kPage = 4096;
  size_t reserved = 0;
  for (const BlockCount& b : blocks) {
    const size_t size = round_up(b.bytes);
    for (size_t i = 0; i < b.count; ++i) {
      if (stop.load(std::memory_order_relaxed) || reserved + size > max_bytes) return reserved;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (static_cast<size_t>(stats_.reserved_bytes) + size > capacity_ / 2) return reserved;
      }
      void* ptr = new_block(size);
      if (ptr == nullptr) return reserved;
      auto* bytes = static_cast<volatile char*>(ptr);
      for (size_t at = 0; at < size; at += kPage) bytes[at] = 0;
      bytes[size - 1] = 0;  // the block need not start a page: its last one too
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<size_t>(stats_.reserved_bytes) + size > capacity_ / 2) {
        std::free(ptr);  // the program took the room meanwhile: reserved stays within the capacity
        return reserved;
      }
      cached_[size].push_back(ptr);
      prefilled_.emplace(ptr, size);
      stats_.reserved_bytes += static_cast<int64_t>(size);
      stats_.reserved_bytes_total += static_cast<int64_t>(size);
      stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
      prefill_stats_.reserved_bytes += static_cast<int64_t>(size);
      reserved += size;
    }
  }
  return reserved;
}

MemoryPool::PrefillStats MemoryPool::prefill_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prefill_stats_;
}

void MemoryPool::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

bool MemoryPool::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.count(const_cast<void*>(ptr)) != 0;
}

MemoryStats MemoryPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void MemoryPool::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
  stats_.peak_requested_bytes = stats_.requested_bytes;
  stats_.peak_live_allocations = stats_.live_allocations;
}

void MemoryPool::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats& s = stats_;
  s.allocation_count = s.free_count = s.oom_count = 0;
  s.allocated_bytes_total = s.freed_bytes_total = 0;
  s.requested_bytes_total = s.requested_freed_bytes_total = 0;
  s.reserved_bytes_total = s.released_bytes_total = 0;
}

}  // namespace kiln::runtime
