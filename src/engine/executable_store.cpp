// The process's persistent store and warnings (see executable_store.h).
#include "engine/executable_store.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <set>

#include "engine/background_compiles.h"
#include "engine/stored_verdicts.h"
#include "engine/warm_start.h"
#include "kiln/log.h"
#include "kiln/run_log.h"

namespace kiln::engine {
namespace {

std::mutex g_mu;
// Never destroyed: a store still open at static destruction (close_store
// not called) is left to the exit, not closed after RocksDB's statics died.
std::shared_ptr<cache::Store>& g_store = *new std::shared_ptr<cache::Store>();
pid_t g_store_pid = 0;
std::set<std::string> g_warned;
std::vector<std::string> g_warnings;
std::atomic<bool> g_may_have_warnings{false};
std::atomic<uint64_t> g_run_hits{0}, g_run_misses{0}, g_run_compiles{0};

// This process's line in runs.log. Not for a process that did nothing with
// kernels (`python -m kiln cache stats` itself), and not in read-only mode,
// which never writes the cache directory. A failure to append is ignored:
// the log is statistics, and the store's own failures are warned about.
void record_run(cache::Store& s) {
  cache::RunRecord r;
  r.hits = g_run_hits.load();
  r.misses = g_run_misses.load();
  r.compiles = g_run_compiles.load();
  r.evicted = s.counters().evicted;
  if (s.read_only() || r.hits + r.misses + r.compiles + r.evicted == 0) return;
  r.unix_s = static_cast<int64_t>(std::time(nullptr));
  r.pid = ::getpid();
  cache::append_run(s.dir(), r);
}

void forget_store_in_child() {
  // Leaked on purpose: destroying it would join a writer thread that does
  // not exist in the child. The mutex may have been held at the fork.
  new (&g_mu) std::mutex();
  if (g_store) new std::shared_ptr<cache::Store>(std::move(g_store));
  g_store_pid = 0;
}

}  // namespace

void open_store(const cache::StoreOptions& options) {
  const std::string& dir = options.dir;
  const bool read_only = options.read_only;
  std::shared_ptr<cache::Store> opened;
  if (!dir.empty()) {
    std::string why;
    opened = cache::Store::open(options, why);
    if (!opened) {
      warn_once("kiln: the executable cache directory " + why +
                ". Compiled kernels are kept in this process's memory only; set KILN_CACHE_DIR to a private "
                "directory, or KILN_CACHE=0 to silence this.");
    } else {
      log("cache", "persistent store in '" + dir + "'" + (read_only ? " (read-only)" : ""));
    }
  }
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, &forget_store_in_child); });
  std::lock_guard<std::mutex> lock(g_mu);
  g_store = std::move(opened);
  g_store_pid = ::getpid();
}

std::shared_ptr<cache::Store> store() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_store;
}

void warn_once(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_warned.insert(message).second) return;
  g_warnings.push_back(message);
  g_may_have_warnings.store(true, std::memory_order_release);
}

std::vector<std::string> take_warnings() {
  std::shared_ptr<cache::Store> s = store();
  if (s) {
    const std::string w = s->take_warning();
    if (!w.empty()) warn_once(w);
  }
  if (!g_may_have_warnings.load(std::memory_order_acquire)) return {};
  std::lock_guard<std::mutex> lock(g_mu);
  g_may_have_warnings.store(false, std::memory_order_relaxed);
  return std::exchange(g_warnings, {});
}

void close_store(int timeout_ms) {
  // While the store is open: the kernels they build are stored too (a
  // trace's compile queued by the library tier may have just started).
  finish_background_compiles();
  std::shared_ptr<cache::Store> s;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (::getpid() != g_store_pid) return;  // a forked child: not its store
    s = std::move(g_store);
  }
  save_verdicts();
  save_warm_start();
  if (!s) return;
  s->flush(std::chrono::milliseconds(timeout_ms));
  // A write that failed during this last flush (a full disk) is still told:
  // the caller shows take_warnings() after this.
  if (const std::string w = s->take_warning(); !w.empty()) warn_once(w);
  record_run(*s);
}

void count_run_event(RunEvent event) {
  switch (event) {
    case RunEvent::StoreHit: g_run_hits.fetch_add(1, std::memory_order_relaxed); break;
    case RunEvent::StoreMiss: g_run_misses.fetch_add(1, std::memory_order_relaxed); break;
    case RunEvent::Compile: g_run_compiles.fetch_add(1, std::memory_order_relaxed); break;
  }
}

bool flush_store(int timeout_ms) {
  const std::shared_ptr<cache::Store> s = store();
  return !s || s->flush(std::chrono::milliseconds(timeout_ms));
}

}  // namespace kiln::engine

namespace kiln::engine {

std::string store_dir() {
  const std::shared_ptr<cache::Store> s = store();
  return s ? s->dir() : "";
}

std::vector<cache::StoreListing> stored_entries() {
  const std::shared_ptr<cache::Store> s = store();
  return s ? s->list(fingerprint()) : std::vector<cache::StoreListing>{};
}

size_t clear_store() {
  const std::shared_ptr<cache::Store> s = store();
  return s ? s->clear() : 0;
}

}  // namespace kiln::engine
