// The process's persistent store and warnings (see executable_store.h).
#include "engine/executable_store.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>

#include "engine/stored_verdicts.h"
#include "kiln/log.h"

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
  std::shared_ptr<cache::Store> s;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (::getpid() != g_store_pid) return;  // a forked child: not its store
    s = std::move(g_store);
  }
  save_verdicts();
  if (s) s->flush(std::chrono::milliseconds(timeout_ms));
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
