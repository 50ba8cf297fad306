// MemoryPool: accounting, caching, alignment, capacity and OOM reporting.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/runtime.h"

using kiln::runtime::MemoryPool;
using kiln::runtime::MemoryStats;
using kiln::runtime::OutOfMemoryError;

namespace {

constexpr size_t kG = MemoryPool::kGranularity;

TEST(MemoryPool, FreshPoolHasZeroStatsAndCapacity) {
  MemoryPool pool(0, 1 << 20);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.peak_allocated_bytes, 0);
  EXPECT_EQ(s.peak_reserved_bytes, 0);
  EXPECT_EQ(s.allocation_count, 0);
  EXPECT_EQ(s.free_count, 0);
  EXPECT_EQ(s.oom_count, 0);
  EXPECT_EQ(s.capacity_bytes, 1 << 20);
  EXPECT_EQ(pool.capacity(), size_t(1) << 20);
}

TEST(MemoryPool, TotalsPeaksAndTheirResetsAreSeparate) {
  MemoryPool pool(0, 1 << 20);
  void* a = pool.allocate(100);
  void* b = pool.allocate(kG + 1);
  pool.free(a);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.live_allocations, 1);
  EXPECT_EQ(s.peak_live_allocations, 2);
  EXPECT_EQ(s.requested_bytes, int64_t(kG + 1));
  EXPECT_EQ(s.peak_requested_bytes, int64_t(kG + 101));
  EXPECT_EQ(s.allocated_bytes_total, int64_t(3 * kG));
  EXPECT_EQ(s.freed_bytes_total, int64_t(kG));
  EXPECT_EQ(s.requested_bytes_total, int64_t(kG + 101));
  EXPECT_EQ(s.requested_freed_bytes_total, 100);
  EXPECT_EQ(s.reserved_bytes_total, int64_t(3 * kG));
  pool.empty_cache();
  EXPECT_EQ(pool.stats().released_bytes_total, int64_t(kG));

  pool.reset_accumulated_stats();  // totals restart; what is live and the peaks stay
  s = pool.stats();
  EXPECT_EQ(s.allocation_count, 0);
  EXPECT_EQ(s.free_count, 0);
  EXPECT_EQ(s.allocated_bytes_total, 0);
  EXPECT_EQ(s.freed_bytes_total, 0);
  EXPECT_EQ(s.released_bytes_total, 0);
  EXPECT_EQ(s.live_allocations, 1);
  EXPECT_EQ(s.peak_live_allocations, 2);

  pool.reset_peak_stats();  // peaks come down to what is live
  s = pool.stats();
  EXPECT_EQ(s.peak_live_allocations, 1);
  EXPECT_EQ(s.peak_requested_bytes, int64_t(kG + 1));
  EXPECT_EQ(s.peak_allocated_bytes, int64_t(2 * kG));
  pool.free(b);
}

TEST(MemoryPool, AllocationAccountingRoundsToGranularity) {
  MemoryPool pool(0, 1 << 20);
  void* a = pool.allocate(100);     // -> 512
  void* b = pool.allocate(kG);      // -> 512
  void* c = pool.allocate(kG + 1);  // -> 1024
  void* d = pool.allocate(0);       // -> 512 (zero still gets a distinct block)
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(d, nullptr);
  std::set<void*> distinct{a, b, c, d};
  EXPECT_EQ(distinct.size(), 4u);

  MemoryStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, int64_t(5 * kG));
  EXPECT_EQ(s.reserved_bytes, int64_t(5 * kG));
  EXPECT_EQ(s.peak_allocated_bytes, int64_t(5 * kG));
  EXPECT_EQ(s.peak_reserved_bytes, int64_t(5 * kG));
  EXPECT_EQ(s.allocation_count, 4);
  EXPECT_EQ(s.free_count, 0);
  EXPECT_TRUE(pool.owns(a) && pool.owns(b) && pool.owns(c) && pool.owns(d));

  pool.free(c);
  s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, int64_t(3 * kG));
  EXPECT_EQ(s.reserved_bytes, int64_t(5 * kG));  // cached, not released
  EXPECT_EQ(s.peak_allocated_bytes, int64_t(5 * kG));
  EXPECT_EQ(s.free_count, 1);
  EXPECT_FALSE(pool.owns(c));

  pool.free(a);
  pool.free(b);
  pool.free(d);
  s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, int64_t(5 * kG));
  EXPECT_EQ(s.allocation_count, 4);
  EXPECT_EQ(s.free_count, 4);
}

TEST(MemoryPool, FreeOfNullIsANoOp) {
  MemoryPool pool(0, 1 << 20);
  pool.free(nullptr);
  EXPECT_EQ(pool.stats().free_count, 0);
}

TEST(MemoryPool, ReusesCachedBlockOfSameRoundedSize) {
  MemoryPool pool(0, 1 << 20);
  void* a = pool.allocate(1000);  // rounds to 1024
  pool.free(a);
  void* b = pool.allocate(1024);  // same rounded size: the cached block comes back
  EXPECT_EQ(a, b);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 1024);  // no new reservation
  EXPECT_EQ(s.allocated_bytes, 1024);
  EXPECT_EQ(s.allocation_count, 2);

  // A larger rounded size does not take the cached block.
  pool.free(b);
  void* c = pool.allocate(2048);
  EXPECT_NE(c, b);
  EXPECT_EQ(pool.stats().reserved_bytes, 1024 + 2048);
  pool.free(c);
}

// A sequence of a new length each call: a shorter one takes the block a
// longer one freed (mapped already) rather than a fresh one, up to twice
// its size. Allocated bytes count the request (rounded), whichever block
// serves it; reserved bytes count the block.
TEST(MemoryPool, ASmallerRequestTakesACachedBlockUpToTwiceItsSize) {
  MemoryPool pool(0, 1 << 20);
  void* big = pool.allocate(4096);
  pool.free(big);
  void* half = pool.allocate(2048);
  EXPECT_EQ(half, big);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 4096);
  EXPECT_EQ(s.allocated_bytes, 2048);
  EXPECT_EQ(s.requested_bytes, 2048);
  pool.free(half);
  EXPECT_EQ(pool.stats().allocated_bytes, 0);

  // Less than half the block's size: a fresh block of its own.
  void* small = pool.allocate(1536);
  EXPECT_NE(small, big);
  EXPECT_EQ(pool.stats().reserved_bytes, 4096 + 1536);
  pool.free(small);

  // The smallest cached block that fits is taken.
  void* again = pool.allocate(1024);
  EXPECT_EQ(again, small);
  pool.free(again);
}

TEST(MemoryPool, BlocksAre64ByteAlignedAndWritable) {
  MemoryPool pool(0, 8 << 20);
  std::vector<void*> ptrs;
  for (size_t bytes : {1, 7, 63, 64, 65, 511, 512, 513, 4096, 100000}) {
    void* p = pool.allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % MemoryPool::kAlignment, 0u) << "bytes=" << bytes;
    std::memset(p, 0xAB, bytes);
    ptrs.push_back(p);
  }
  for (void* p : ptrs) pool.free(p);
}

// The system's transparent huge page mode: "always", "madvise" or "never".
std::string transparent_huge_pages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "never" : line.substr(open + 1, close - open - 1);
}

// AnonHugePages of the mapping that holds `address`, in kB (/proc/self/smaps).
long huge_kb_of_mapping_at(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(address);
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2 && line.find(':') > line.find(' ')) {
      inside = start <= at && at < end;
    } else if (long kb = 0; inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) {
      return kb;
    }
  }
  return -1;
}

TEST(MemoryPool, ABlockOfAHugePageOrMoreStartsAtOneAndIsBackedByHugePages) {
  MemoryPool pool(0, size_t{64} << 20);
  constexpr size_t kHuge = size_t{2} << 20;
  void* small = pool.allocate(kHuge - kG);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % MemoryPool::kAlignment, 0u);
  char* big = static_cast<char*>(pool.allocate(8 * kHuge));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % kHuge, 0u);
  std::memset(big, 1, 8 * kHuge);  // the first touch faults its pages in
  const std::string mode = transparent_huge_pages();
  if (mode == "never") GTEST_SKIP() << "transparent huge pages are off on this system";
  // The kernel may find no free huge page at a fault (fragmented memory):
  // some of the 8 are enough to show the advice was taken.
  EXPECT_GE(huge_kb_of_mapping_at(big), 2048) << "mode " << mode;
  pool.free(big);
  pool.free(small);
}

TEST(MemoryPool, CapacityLimitThrowsOutOfMemoryNamingTheNumbers) {
  const size_t cap = 64 * 1024;
  MemoryPool pool(3, cap);
  void* a = pool.allocate(40 * 1024);
  const size_t want = 32 * 1024;
  try {
    pool.allocate(want);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.device, 3);
    EXPECT_EQ(e.requested, want);
    EXPECT_EQ(e.free_bytes, size_t(24 * 1024));
    EXPECT_EQ(e.capacity, cap);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("device 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(want)), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(24 * 1024)), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(cap)), std::string::npos) << msg;
  }
  EXPECT_EQ(pool.stats().oom_count, 1);
  pool.free(a);
}

TEST(MemoryPool, OutOfMemoryIsARuntimeError) {
  MemoryPool pool(0, 4096);
  EXPECT_THROW(pool.allocate(8192), std::runtime_error);
}

TEST(MemoryPool, HugeRequestsThrowOutOfMemoryInsteadOfWrapping) {
  // Rounding a request near SIZE_MAX up to the granularity must not wrap to a
  // tiny block, and reserved + size must not overflow the capacity check.
  MemoryPool pool(0, 1 << 20);
  void* a = pool.allocate(4096);
  const size_t max = std::numeric_limits<size_t>::max();
  for (size_t bytes : {max, max - 1, max - kG + 2, max - 1000, max / 2}) {
    EXPECT_THROW(pool.allocate(bytes), OutOfMemoryError) << "bytes=" << bytes;
  }
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.allocation_count, 1);
  EXPECT_EQ(s.allocated_bytes, 4096);
  EXPECT_EQ(s.oom_count, 5);
  pool.free(a);
}

TEST(MemoryPool, KeepsWorkingAfterOutOfMemory) {
  MemoryPool pool(0, 16 * 1024);
  void* a = pool.allocate(8 * 1024);
  EXPECT_THROW(pool.allocate(16 * 1024), OutOfMemoryError);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, 8 * 1024);
  EXPECT_EQ(s.allocation_count, 1);

  void* b = pool.allocate(8 * 1024);  // exactly fills the pool
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pool.stats().allocated_bytes, 16 * 1024);
  pool.free(a);
  pool.free(b);
  void* c = pool.allocate(16 * 1024);  // after freeing, the whole pool is usable
  ASSERT_NE(c, nullptr);
  pool.free(c);
}

TEST(MemoryPool, AllocationReleasesCachedBlocksBeforeGivingUp) {
  MemoryPool pool(0, 16 * 1024);
  void* a = pool.allocate(8 * 1024);
  void* b = pool.allocate(8 * 1024);
  pool.free(a);
  pool.free(b);
  EXPECT_EQ(pool.stats().reserved_bytes, 16 * 1024);
  // 12 KiB has no cached block of its size; the cache is emptied to make room.
  void* c = pool.allocate(12 * 1024);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 12 * 1024);
  EXPECT_EQ(s.allocated_bytes, 12 * 1024);
  EXPECT_EQ(s.oom_count, 0);
  pool.free(c);
}

TEST(MemoryPool, EmptyCacheLowersReservedButKeepsLiveBlocks) {
  MemoryPool pool(0, 1 << 20);
  void* live = pool.allocate(4096);
  void* x = pool.allocate(8192);
  void* y = pool.allocate(1024);
  pool.free(x);
  pool.free(y);
  EXPECT_EQ(pool.stats().reserved_bytes, 4096 + 8192 + 1024);
  pool.empty_cache();
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 4096);
  EXPECT_EQ(s.allocated_bytes, 4096);
  EXPECT_EQ(s.peak_reserved_bytes, 4096 + 8192 + 1024);
  EXPECT_TRUE(pool.owns(live));
  std::memset(live, 1, 4096);  // still valid memory
  pool.free(live);
  pool.empty_cache();
  EXPECT_EQ(pool.stats().reserved_bytes, 0);
}

TEST(MemoryPool, FreeingAForeignPointerThrowsInvalidArgument) {
  MemoryPool pool(0, 1 << 20);
  MemoryPool other(1, 1 << 20);
  int on_stack = 0;
  EXPECT_THROW(pool.free(&on_stack), std::invalid_argument);
  void* p = other.allocate(512);
  EXPECT_FALSE(pool.owns(p));
  EXPECT_THROW(pool.free(p), std::invalid_argument);
  EXPECT_EQ(pool.stats().free_count, 0);
  other.free(p);
  // Double free is also a foreign pointer as far as the pool is concerned.
  void* q = pool.allocate(512);
  pool.free(q);
  EXPECT_THROW(pool.free(q), std::invalid_argument);
  EXPECT_EQ(pool.stats().free_count, 1);
}

TEST(MemoryPool, ResetPeakStatsDropsPeaksToCurrent) {
  MemoryPool pool(0, 1 << 20);
  void* a = pool.allocate(4096);
  void* b = pool.allocate(8192);
  pool.free(b);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 4096 + 8192);
  EXPECT_EQ(s.peak_reserved_bytes, 4096 + 8192);

  pool.empty_cache();
  pool.reset_peak_stats();
  s = pool.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 4096);
  EXPECT_EQ(s.peak_reserved_bytes, 4096);

  void* c = pool.allocate(1024);
  s = pool.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 4096 + 1024);
  EXPECT_EQ(s.peak_reserved_bytes, 4096 + 1024);
  pool.free(a);
  pool.free(c);
}

}  // namespace

// What a warm start reserves ahead (engine/warm_start.h): per size, the
// most blocks the program held at once, in order of first use.
TEST(MemoryPool, NeededBlocksArePerSizePeaksInOrderOfFirstUse) {
  MemoryPool pool(0, 1 << 20);
  void* a = pool.allocate(3000);  // 3072
  void* b = pool.allocate(100);   // 512
  void* c = pool.allocate(3000);
  pool.free(a);
  pool.free(c);
  void* d = pool.allocate(3072);  // reuses: no new peak
  pool.free(b);
  pool.free(d);
  const auto needed = pool.needed_blocks();
  ASSERT_EQ(needed.size(), 2u);
  EXPECT_EQ(needed[0].bytes, 3072u);
  EXPECT_EQ(needed[0].count, 2u);
  EXPECT_EQ(needed[1].bytes, 512u);
  EXPECT_EQ(needed[1].count, 1u);
}

TEST(MemoryPool, PrefilledBlocksServeTheNextRunsAllocationsWithoutNewReserves) {
  std::vector<MemoryPool::BlockCount> profile = {{8192, 3}, {512, 2}};
  MemoryPool pool(0, 1 << 20);
  std::atomic<bool> stop{false};
  EXPECT_EQ(pool.prefill(profile, SIZE_MAX, stop), 3 * 8192u + 2 * 512u);
  const int64_t reserved = pool.stats().reserved_bytes;
  EXPECT_EQ(reserved, 3 * 8192 + 2 * 512);
  EXPECT_EQ(pool.stats().allocated_bytes, 0);  // reserved, not handed out
  std::vector<void*> taken;
  for (int i = 0; i < 3; ++i) taken.push_back(pool.allocate(8000));
  taken.push_back(pool.allocate(512));
  EXPECT_EQ(pool.stats().reserved_bytes, reserved);  // all served from the reserve
  EXPECT_EQ(pool.prefill_stats().reserved_bytes, reserved);
  EXPECT_EQ(pool.prefill_stats().used_bytes, 3 * 8192 + 512);
  for (void* p : taken) pool.free(p);
  pool.empty_cache();  // a prefilled block goes back like any cached one
  EXPECT_EQ(pool.stats().reserved_bytes, 0);
}

TEST(MemoryPool, PrefillStopsAtItsLimitAtHalfTheCapacityAndWhenAsked) {
  std::atomic<bool> stop{false};
  {
    MemoryPool pool(0, 1 << 20);
    EXPECT_EQ(pool.prefill({{4096, 100}}, 10 * 4096, stop), 10 * 4096u);
  }
  {
    MemoryPool pool(0, 64 * 4096);
    EXPECT_EQ(pool.prefill({{4096, 100}}, SIZE_MAX, stop), 32 * 4096u);  // half of 64 pages
    EXPECT_NO_THROW(pool.allocate(32 * 4096));                           // the rest stays the program's
  }
  {
    MemoryPool pool(0, 1 << 20);
    stop = true;
    EXPECT_EQ(pool.prefill({{4096, 100}}, SIZE_MAX, stop), 0u);
  }
}

TEST(MemoryPool, PrefilledBlocksAreGivenBackWhenTheProgramNeedsTheRoom) {
  MemoryPool pool(0, 64 * 4096);
  std::atomic<bool> stop{false};
  ASSERT_EQ(pool.prefill({{4096, 32}}, SIZE_MAX, stop), 32 * 4096u);
  void* big = pool.allocate(48 * 4096);  // fits only once the reserve is released
  EXPECT_NE(big, nullptr);
  pool.free(big);
}
