// Process-wide counters: what kiln did, by op and by reason. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln {

enum class Counter {
  Launches,            // every launch on a device queue, by op (library kernels and copies)
  TracedOps,           // ops recorded in lazy mode and run inside fused kernels, by op
  LibraryKernels,      // ops run as the CPU implementation on device memory, by op
  Fallbacks,           // ops that needed a host round trip, by op
  SyncPoints,          // host waits for a device, by reason
  Errors,              // failed launches and rejected ops, by op
  BytesCopied,         // bytes copied, by direction (host_to_device, device_to_host, device_to_device)
  TraceFlushes,        // micro-traces flushed, by reason
  Regions,             // fused regions, by size bucket ("1 op", "2-3 ops", ...): a histogram
  KernelsCompiled,     // kernels compiled by LLVM, by kind (pointwise, row)
  CompileTime,         // compiling thread's CPU time in microseconds: total_us, max_us; max_wall_us; warm_up_us
  ExecutableCache,     // executables a flush needed: hit (also every kernel of a reused plan), miss
  PlanCache,           // flush plans: hit (reused for a trace of the same structure), miss
  ExecutableLaunches,  // compiled kernels launched, by kind
  BytesNotWritten,     // bytes fusion did not store (dead intermediates)
};

class Metrics {
 public:
  static Metrics& global();

  void add(Counter counter, std::string_view key, int64_t n = 1);
  // Raises the value under `key` to `n` if it is lower (for maxima).
  void raise_to(Counter counter, std::string_view key, int64_t n);
  int64_t get(Counter counter, std::string_view key) const;
  // {"launches": {"aten::add.Tensor": 3, ...}, ...}
  std::map<std::string, std::map<std::string, int64_t>> snapshot() const;
  std::string report() const;
  void reset();

  static const char* counter_name(Counter counter);

 private:
  using Table = std::map<std::string, int64_t, std::less<>>;
  static constexpr int kCounters = 15;
  mutable std::mutex mu_;
  Table tables_[kCounters];
};

}  // namespace kiln
