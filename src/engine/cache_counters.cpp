// The caches' own tallies, added to the metrics when they are read (see
// engine.h, publish_cache_counters).
#include <atomic>
#include <cstdint>

#include "engine/executable_store.h"
#include "engine/plan_cache.h"
#include "engine/warm_start.h"
#include "kiln/engine.h"
#include "kiln/metrics.h"

namespace kiln::engine {
namespace {

// Adds the growth of a running total since the last call: totals only grow,
// and exchange() makes concurrent callers count each step once.
void add_growth(std::atomic<uint64_t>& published, uint64_t total, Counter counter, const char* key) {
  const uint64_t before = published.exchange(total);
  if (total > before) Metrics::global().add(counter, key, static_cast<int64_t>(total - before));
}

}  // namespace

void publish_cache_counters() {
  static std::atomic<uint64_t> memory{0}, plans{0}, stored{0}, waited{0};
  add_growth(memory, executable_cache().evictions(), Counter::ExecutableCache, "evicted");
  add_growth(plans, plan_cache().evictions(), Counter::PlanCache, "evicted");
  publish_warm_start_counters();
  if (const std::shared_ptr<cache::Store> s = store()) {
    const cache::Store::Counters c = s->counters();
    add_growth(stored, c.evicted, Counter::ExecutableStore, "evicted");
    add_growth(waited, c.lock_wait_us, Counter::StoreTime, "lock_wait_us");
  }
}

}  // namespace kiln::engine
