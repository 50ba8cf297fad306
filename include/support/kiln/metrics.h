// Process-wide counters: what kiln did, by op and by reason; and timers:
// where the time went (host time by category, device time by kind of launch).
// Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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
  ExecutableCache,     // executables a flush needed: hit (also every kernel of a reused plan), miss, evicted
  PlanCache,           // flush plans: hit (reused for a trace of the same structure), miss, evicted
  ExecutableLaunches,  // compiled kernels launched, by kind
  BytesNotWritten,     // bytes fusion did not store (dead intermediates)
  BytesReused,         // bytes of outputs given memory only a pending trace still held
  ExecutableStore,     // persistent-cache lookups of kernels not in memory: hit, miss, corrupt, load failed;
                       // evicted (by this process's writer, past KILN_CACHE_MAX_MB)
  StoreTime,           // persistent cache, microseconds: load_us (hits' get and load), compile_saved_us,
                       // lock_wait_us (the writer waiting for other processes' batches)
  StoredVerdicts,      // first-sight argument checks kept in the cache directory: loaded (at the first
                       // query), used (a check skipped), learned (new here, saved at exit)
  WarmStart,           // device memory reserved ahead from the program's last run: prefilled_bytes,
                       // prefill_used_bytes (of those, what allocations took)
  Tiers,               // flushes by how their trace ran: fused; library (its ops ran as library kernels
                       // as they were recorded: the adaptive policy's first occurrences)
  FirstSightChecks,    // traced ops' first-sight argument checks, by what the CPU kernel ran on: small
                       // stand-in (a small call of the same case), zero-filled twins (the call's own sizes)
};

struct TimeBreakdown;

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
  // The counters, then the time breakdown as a table (ms and % of wall).
  std::string report(const TimeBreakdown& times) const;
  void reset();

  static const char* counter_name(Counter counter);

 private:
  void write_counters(std::ostream& os) const;
  using Table = std::map<std::string, int64_t, std::less<>>;
  static constexpr int kCounters = static_cast<int>(Counter::FirstSightChecks) + 1;
  mutable std::mutex mu_;
  Table tables_[kCounters];
};

// ---------------------------------------------------------------- timers

// Where host time goes. Each thread charges the time between two changes of
// its innermost TimeScope to that scope's category: exclusive time, so a
// flush inside an op's dispatch counts as flush, not as recording, and a
// wait inside a flush as waiting.
enum class TimeCategory : int8_t {
  HostRecord,  // kiln's dispatch of device ops: recording, shape inference, argument checks, enqueueing
  Flush,       // flushing traces: signatures, plans, launch submission
  Compile,     // compiling with LLVM (and a compile's wait for the compiler warm-up)
  HostWait,    // blocked waiting for a device
};
constexpr int kTimeCategories = 4;

namespace detail {
bool time_stamp_counter_is_reliable();
}  // namespace detail

// The timers' clock, in ticks: the time-stamp counter where the kernel
// trusts it (its clocksource is "tsc": invariant and synchronized across
// CPUs), else steady_clock nanoseconds. A plain rdtsc overlaps with the work
// around it; steady_clock's fenced read costs ~40 ns on this project's
// machines, too much for two reads per op on a ~2 us op.
inline int64_t clock_ticks() {
#if defined(__x86_64__)
  static const bool tsc = detail::time_stamp_counter_is_reliable();
  if (tsc) return static_cast<int64_t>(__builtin_ia32_rdtsc());
#endif
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Seconds per tick of clock_ticks(): the counter's rate, measured against
// steady_clock since the library was loaded.
double seconds_per_tick();
inline double ticks_to_seconds(int64_t ticks) { return ticks * seconds_per_tick(); }

namespace detail {
// One thread's host times. Written only by its thread (relaxed stores, no
// read-modify-write); read by snapshots through the registry.
struct ThreadTimes {
  std::atomic<int64_t> ticks[kTimeCategories] = {};
  int64_t since = 0;    // when `current` began
  int8_t current = -1;  // the innermost scope's category; -1: outside kiln
  bool registered = false;
};
// Trivially destructible and constant-initialized: no guard on access.
inline thread_local ThreadTimes t_thread_times;
void register_thread(ThreadTimes& t);  // with the registry; unregistered at thread exit

// When Timers::reset() last ran (clock_ticks()): a stretch of time that
// began before it counts from there.
inline std::atomic<int64_t> g_reset_ticks{0};

inline void switch_category(ThreadTimes& t, int8_t next) {
  const int64_t now = clock_ticks();
  const int64_t from = std::max(t.since, g_reset_ticks.load(std::memory_order_relaxed));
  if (t.current >= 0 && now > from) {  // a thread moved between CPUs may read an earlier stamp
    std::atomic<int64_t>& a = t.ticks[t.current];
    a.store(a.load(std::memory_order_relaxed) + (now - from), std::memory_order_relaxed);
  }
  t.since = now;
  t.current = next;
}
}  // namespace detail

// Charges the calling thread's time to `category` until it ends (or until a
// nested scope of another category begins). A scope nested in one of its own
// category reads no clock.
class TimeScope {
 public:
  explicit TimeScope(TimeCategory category)
      : t_(detail::t_thread_times), previous_(t_.current), active_(static_cast<int8_t>(category) != previous_) {
    if (!active_) return;
    if (!t_.registered) detail::register_thread(t_);
    detail::switch_category(t_, static_cast<int8_t>(category));
  }
  ~TimeScope() {
    if (active_) detail::switch_category(t_, previous_);
  }
  TimeScope(const TimeScope&) = delete;
  TimeScope& operator=(const TimeScope&) = delete;

 private:
  detail::ThreadTimes& t_;
  const int8_t previous_;
  const bool active_;
};

// Device time of one device, in clock_ticks(), as its queue's worker
// measured each task it ran.
struct DeviceTimes {
  int64_t busy_ticks = 0;     // every task: kernels, copies, queued frees, event markers
  int64_t fused_ticks = 0;    // compiled (fused) kernels
  int64_t library_ticks = 0;  // library kernels and copies
  std::unordered_map<std::string, int64_t> library_ticks_by_name;  // by launch name ("aten::mm", "copy host->device")
};

// Seconds since the last Timers::reset(); see python/kiln/metrics.py.
struct TimeBreakdown {
  double wall_s = 0;
  double host_record_s = 0;  // every thread's
  double flush_s = 0;
  double compile_s = 0;
  double host_wait_s = 0;
  double host_python_s = 0;  // the main thread's time outside the four above
  double fused_kernel_s = 0;
  double library_kernel_s = 0;
  double device_busy_s = 0;  // summed over devices
  double device_idle_s = 0;  // summed over the devices that ran anything (device 0 when none did)
  std::map<std::string, double> library_kernels_by_op;
};

// The process-wide host timers (every thread's TimeScopes) and the wall
// clock they are read against.
class Timers {
 public:
  static Timers& global();

  // The thread whose time outside kiln is host_python_s (the one Python's
  // main thread runs on). Until one is marked, host_python_s is wall time.
  void mark_main_thread();
  // Zeroes the host times and restarts the wall clock.
  void reset();
  // When reset() last ran, in clock_ticks(): the device's task timers count
  // a task that spans it from there.
  static int64_t last_reset_ticks() { return detail::g_reset_ticks.load(std::memory_order_relaxed); }
  // The host times since the last reset, and `devices`' times (each reset
  // by its owner at the same reset), as one breakdown.
  TimeBreakdown breakdown(const std::vector<DeviceTimes>& devices) const;

  // A thread's first scope enrolls it; its exit retires it, keeping what it timed.
  void enroll(detail::ThreadTimes& t);
  void retire(detail::ThreadTimes& t);

 private:
  Timers();
  struct Totals {
    int64_t all[kTimeCategories] = {};
    int64_t main[kTimeCategories] = {};
  };
  Totals totals_locked() const;
  mutable std::mutex mu_;
  std::vector<detail::ThreadTimes*> live_;
  detail::ThreadTimes* main_ = nullptr;
  Totals retired_;  // of threads that exited
  Totals base_;     // at the last reset
};

}  // namespace kiln
