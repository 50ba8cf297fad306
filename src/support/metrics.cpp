#include "kiln/metrics.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <thread>
#include <vector>

namespace kiln {

Metrics& Metrics::global() {
  static Metrics* m = new Metrics();  // never destroyed: read by at-exit reporting
  return *m;
}

const char* Metrics::counter_name(Counter counter) {
  switch (counter) {
    case Counter::Launches: return "launches";
    case Counter::TracedOps: return "traced_ops";
    case Counter::LibraryKernels: return "library_kernels";
    case Counter::Fallbacks: return "fallbacks";
    case Counter::SyncPoints: return "sync_points";
    case Counter::Errors: return "errors";
    case Counter::BytesCopied: return "bytes_copied";
    case Counter::TraceFlushes: return "trace_flushes";
    case Counter::Regions: return "regions";
    case Counter::KernelsCompiled: return "kernels_compiled";
    case Counter::CompileTime: return "compile_time";
    case Counter::ExecutableCache: return "executable_cache";
    case Counter::PlanCache: return "plan_cache";
    case Counter::ExecutableLaunches: return "executable_launches";
    case Counter::BytesNotWritten: return "bytes_not_written";
    case Counter::BytesReused: return "bytes_reused";
    case Counter::ExecutableStore: return "executable_store";
    case Counter::StoreTime: return "store_time";
    case Counter::StoredVerdicts: return "stored_verdicts";
    case Counter::WarmStart: return "warm_start";
    case Counter::Tiers: return "tiers";
    case Counter::FirstSightChecks: return "first_sight_checks";
  }
  return "?";
}

void Metrics::add(Counter counter, std::string_view key, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  Table& t = tables_[static_cast<int>(counter)];
  auto it = t.find(key);
  if (it == t.end()) t.emplace(std::string(key), n);
  else it->second += n;
}

void Metrics::raise_to(Counter counter, std::string_view key, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  Table& t = tables_[static_cast<int>(counter)];
  auto it = t.find(key);
  if (it == t.end()) t.emplace(std::string(key), n);
  else it->second = std::max(it->second, n);
}

int64_t Metrics::get(Counter counter, std::string_view key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Table& t = tables_[static_cast<int>(counter)];
  auto it = t.find(key);
  return it == t.end() ? 0 : it->second;
}

std::map<std::string, std::map<std::string, int64_t>> Metrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::map<std::string, int64_t>> out;
  for (int c = 0; c < kCounters; ++c) {
    auto& dst = out[counter_name(static_cast<Counter>(c))];
    for (const auto& [k, v] : tables_[c]) dst.emplace(k, v);
  }
  return out;
}

void Metrics::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : tables_) t.clear();
}

namespace {

constexpr const char* kOpeningRule = "==================== kiln metrics ====================\n";
constexpr const char* kClosingRule = "======================================================\n";

// The breakdown as rows of milliseconds and percent of wall time.
void write_time_breakdown(std::ostream& os, const TimeBreakdown& t) {
  const auto flags = os.flags();
  os << std::fixed << std::setprecision(1);
  auto row = [&](const std::string& name, double seconds) {
    os << "  " << std::left << std::setw(44) << name << std::right << std::setw(12) << seconds * 1e3 << std::setw(10)
       << (t.wall_s > 0 ? 100 * seconds / t.wall_s : 0.0) << "\n";
  };
  os << std::left << std::setw(58) << "time breakdown (since the last reset):" << std::right << "ms" << std::setw(10)
     << "% wall" << "\n";
  row("wall", t.wall_s);
  row("host: recording and dispatch (host_record)", t.host_record_s);
  row("host: flushing traces (flush)", t.flush_s);
  row("host: compiling (compile)", t.compile_s);
  row("host: waiting for the device (host_wait)", t.host_wait_s);
  row("host: python, main thread (host_python)", t.host_python_s);
  row("device: fused kernels (fused_kernel)", t.fused_kernel_s);
  row("device: library kernels (library_kernel)", t.library_kernel_s);
  row("device: idle (device_idle)", t.device_idle_s);
  std::vector<std::pair<std::string, double>> ops(t.library_kernels_by_op.begin(), t.library_kernels_by_op.end());
  std::stable_sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second > b.second; });
  const size_t shown = std::min<size_t>(ops.size(), 5);
  for (size_t i = 0; i < shown; ++i) row("    " + ops[i].first, ops[i].second);
  if (ops.size() > shown) os << "      ... " << ops.size() - shown << " more\n";
  os.flags(flags);
}

}  // namespace

void Metrics::write_counters(std::ostream& os) const {
  auto snap = snapshot();
  auto total = [](const std::map<std::string, int64_t>& m) {
    int64_t s = 0;
    for (auto& [k, v] : m) s += v;
    return s;
  };
  for (int c = 0; c < kCounters; ++c) {
    const char* name = counter_name(static_cast<Counter>(c));
    const auto& table = snap[name];
    // A sum of a total and a maximum means nothing: compile_time shows its rows only.
    if (static_cast<Counter>(c) == Counter::CompileTime) os << name << " (microseconds):\n";
    else os << name << ": " << total(table) << "\n";
    std::vector<std::pair<std::string, int64_t>> rows(table.begin(), table.end());
    std::stable_sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second > b.second; });
    const size_t shown = std::min<size_t>(rows.size(), 15);
    for (size_t i = 0; i < shown; ++i) {
      os << "  " << std::left << std::setw(56) << rows[i].first << std::right << std::setw(12) << rows[i].second
         << "\n";
    }
    if (rows.size() > shown) os << "  ... " << rows.size() - shown << " more\n";
  }
}

std::string Metrics::report() const {
  std::ostringstream os;
  os << kOpeningRule;
  write_counters(os);
  os << kClosingRule;
  return os.str();
}

std::string Metrics::report(const TimeBreakdown& times) const {
  std::ostringstream os;
  os << kOpeningRule;
  write_counters(os);
  write_time_breakdown(os, times);
  os << kClosingRule;
  return os.str();
}

// ---------------------------------------------------------------- timers

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The counter's rate is measured from the library's load to each read.
struct Calibration {
  int64_t ticks = clock_ticks();
  int64_t ns = steady_ns();
};
const Calibration g_calibration;

}  // namespace

// The wall clock of the breakdown starts when the library is loaded (kiln's
// import), not at the first timer.
[[maybe_unused]] static const Timers& g_timers_at_load = Timers::global();

namespace {

// Unregisters the thread's times when it exits (constructed by its first scope).
struct Retirement {
  detail::ThreadTimes* times = nullptr;
  ~Retirement() {
    if (times != nullptr) Timers::global().retire(*times);
  }
};

}  // namespace

bool detail::time_stamp_counter_is_reliable() {
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  return static_cast<bool>(in >> source) && source == "tsc";
}

double seconds_per_tick() {
#if defined(__x86_64__)
  static const bool tsc = detail::time_stamp_counter_is_reliable();
  if (!tsc) return 1e-9;
  // Over a millisecond at least, the two clocks' read jitter is below 1e-4.
  int64_t ns = steady_ns() - g_calibration.ns;
  while (ns < 1000000) {
    std::this_thread::yield();
    ns = steady_ns() - g_calibration.ns;
  }
  return double(ns) * 1e-9 / double(clock_ticks() - g_calibration.ticks);
#else
  return 1e-9;
#endif
}

void detail::register_thread(ThreadTimes& t) {
  static thread_local Retirement retirement;
  t.registered = true;
  retirement.times = &t;
  Timers::global().enroll(t);
}

Timers& Timers::global() {
  static Timers* t = new Timers();  // never destroyed: threads retire into it during shutdown
  return *t;
}

Timers::Timers() { detail::g_reset_ticks.store(clock_ticks()); }

void Timers::enroll(detail::ThreadTimes& t) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.push_back(&t);
}

void Timers::retire(detail::ThreadTimes& t) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int c = 0; c < kTimeCategories; ++c) {
    const int64_t v = t.ticks[c].load(std::memory_order_relaxed);
    retired_.all[c] += v;
    if (&t == main_) retired_.main[c] += v;
  }
  live_.erase(std::remove(live_.begin(), live_.end(), &t), live_.end());
  if (&t == main_) main_ = nullptr;
}

void Timers::mark_main_thread() {
  detail::ThreadTimes& t = detail::t_thread_times;
  if (!t.registered) detail::register_thread(t);
  std::lock_guard<std::mutex> lock(mu_);
  if (main_ == &t) return;
  main_ = &t;
  // What it timed before it became the main thread is not the main thread's.
  for (int c = 0; c < kTimeCategories; ++c) {
    base_.main[c] = retired_.main[c] + t.ticks[c].load(std::memory_order_relaxed);
  }
}

Timers::Totals Timers::totals_locked() const {
  Totals out = retired_;
  for (const detail::ThreadTimes* t : live_) {
    for (int c = 0; c < kTimeCategories; ++c) {
      const int64_t v = t->ticks[c].load(std::memory_order_relaxed);
      out.all[c] += v;
      if (t == main_) out.main[c] += v;
    }
  }
  return out;
}

void Timers::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  base_ = totals_locked();
  detail::g_reset_ticks.store(clock_ticks());
}

TimeBreakdown Timers::breakdown(const std::vector<DeviceTimes>& devices) const {
  Totals now;
  int64_t wall_ticks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    now = totals_locked();
    for (int c = 0; c < kTimeCategories; ++c) {
      now.all[c] -= base_.all[c];
      now.main[c] -= base_.main[c];
    }
    wall_ticks = clock_ticks() - last_reset_ticks();
  }
  const double per_tick = seconds_per_tick();
  auto seconds = [per_tick](int64_t ticks) { return per_tick * double(std::max<int64_t>(ticks, 0)); };
  TimeBreakdown b;
  b.wall_s = seconds(wall_ticks);
  b.host_record_s = seconds(now.all[int(TimeCategory::HostRecord)]);
  b.flush_s = seconds(now.all[int(TimeCategory::Flush)]);
  b.compile_s = seconds(now.all[int(TimeCategory::Compile)]);
  b.host_wait_s = seconds(now.all[int(TimeCategory::HostWait)]);
  int64_t main_in_kiln = 0;
  for (int c = 0; c < kTimeCategories; ++c) main_in_kiln += now.main[c];
  b.host_python_s = seconds(wall_ticks - main_in_kiln);
  bool any_ran = false;
  for (const DeviceTimes& d : devices) {
    b.fused_kernel_s += seconds(d.fused_ticks);
    b.library_kernel_s += seconds(d.library_ticks);
    b.device_busy_s += seconds(d.busy_ticks);
    for (const auto& [name, ticks] : d.library_ticks_by_name) b.library_kernels_by_op[name] += seconds(ticks);
    if (d.busy_ticks > 0) {
      any_ran = true;
      b.device_idle_s += seconds(wall_ticks - d.busy_ticks);
    }
  }
  if (!any_ran) b.device_idle_s = b.wall_s;
  return b;
}

}  // namespace kiln
