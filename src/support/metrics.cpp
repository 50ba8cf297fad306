#include "kiln/metrics.h"

#include <algorithm>
#include <iomanip>
#include <sstream>
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

std::string Metrics::report() const {
  auto snap = snapshot();
  std::ostringstream os;
  os << "==================== kiln metrics ====================\n";
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
  os << "======================================================\n";
  return os.str();
}

}  // namespace kiln
