// First-sight verdicts kept across processes (see stored_verdicts.h and
// include/cache/kiln/record_file.h).
#include "engine/stored_verdicts.h"

#include <unistd.h>

#include <mutex>
#include <unordered_set>
#include <vector>

#include "kiln/engine.h"
#include "kiln/log.h"
#include "kiln/metrics.h"
#include "kiln/record_file.h"

namespace kiln::engine {
namespace {

// A file holds at most this many (1 MiB): a process that learns more saves
// those it learned and what fits of the rest. A process keeps no more in
// memory either (about 3 MiB): past it, new cases are checked at first sight
// as without a store, and not learned.
constexpr size_t kMaxRecords = 1 << 16;

struct RecordHash {
  size_t operator()(const cache::Record& r) const { return static_cast<size_t>(r.key * 31 + r.value); }
};

struct Verdicts {
  std::mutex mu;
  std::string path, identity;  // path empty: off
  bool read_only = false;
  bool loaded = false;
  pid_t owner = 0;  // a forked child uses the parent's, saves none
  std::unordered_set<cache::Record, RecordHash> known;
  std::vector<cache::Record> learned;

  // Caller holds mu.
  void load() {
    loaded = true;
    std::string problem;
    std::vector<cache::Record> records = cache::read_records(path, cache::kRecordVerdicts, identity, problem);
    if (!problem.empty()) {
      // Damaged or foreign: ignored and, at exit, replaced by what this
      // process learns. Never trusted in part.
      log("cache", "verdict file '" + path + "' ignored: " + problem);
      return;
    }
    known.insert(records.begin(), records.end());
    if (!records.empty())
      Metrics::global().add(Counter::StoredVerdicts, "loaded", static_cast<int64_t>(records.size()));
  }
};

Verdicts& verdicts() {
  static auto* v = new Verdicts();  // never destroyed: queried until the process ends
  return *v;
}

}  // namespace

void open_verdicts(const std::string& dir, const std::string& identity, bool read_only) {
  Verdicts& v = verdicts();
  std::lock_guard<std::mutex> lock(v.mu);
  v.path = dir.empty() || identity.empty() ? "" : cache::record_file_path(dir, cache::kRecordVerdicts, identity);
  v.identity = identity;
  v.read_only = read_only;
  v.loaded = false;
  v.owner = ::getpid();
  v.known.clear();
  v.learned.clear();
}

bool verdict_is_stored(uint64_t op, uint64_t signature) {
  Verdicts& v = verdicts();
  std::lock_guard<std::mutex> lock(v.mu);
  if (v.path.empty()) return false;
  if (!v.loaded) v.load();
  if (!v.known.count({op, signature})) return false;
  Metrics::global().add(Counter::StoredVerdicts, "used");
  return true;
}

void store_verdict(uint64_t op, uint64_t signature) {
  Verdicts& v = verdicts();
  std::lock_guard<std::mutex> lock(v.mu);
  if (v.path.empty() || v.read_only) return;
  if (!v.loaded) v.load();
  if (v.known.size() >= kMaxRecords || !v.known.insert({op, signature}).second) return;
  v.learned.push_back({op, signature});
  Metrics::global().add(Counter::StoredVerdicts, "learned");
}

void save_verdicts() {
  Verdicts& v = verdicts();
  std::lock_guard<std::mutex> lock(v.mu);
  if (v.path.empty() || v.read_only || v.learned.empty() || v.owner != ::getpid()) return;
  // What other processes saved since this one loaded, then what it learned.
  std::string problem;
  std::vector<cache::Record> records = cache::read_records(v.path, cache::kRecordVerdicts, v.identity, problem);
  std::unordered_set<cache::Record, RecordHash> seen(records.begin(), records.end());
  for (const cache::Record& r : v.learned) {
    if (seen.insert(r).second) records.push_back(r);
  }
  if (records.size() > kMaxRecords) records.erase(records.begin(), records.end() - kMaxRecords);  // keep the newest
  const std::string failed = cache::write_records(v.path, cache::kRecordVerdicts, v.identity, records);
  log("cache", failed.empty() ? "saved " + std::to_string(v.learned.size()) + " new verdicts to '" + v.path + "'"
                              : "saving verdicts to '" + v.path + "' failed: " + failed);
  v.learned.clear();
}

}  // namespace kiln::engine
