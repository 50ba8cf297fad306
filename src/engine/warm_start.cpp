// What a program's last run needed, made ready while it starts (see warm_start.h).
#include "engine/warm_start.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/executable_store.h"
#include "kiln/background_thread.h"
#include "kiln/engine.h"
#include "kiln/log.h"
#include "kiln/metrics.h"
#include "kiln/record_file.h"
#include "kiln/runtime.h"

namespace kiln::engine {
namespace {

// A program's memory reserve is at most this (and half a device's
// capacity): a long-lived process (a test suite) needs many sizes over its
// life, and all of them at start would be a lot of memory for little gain.
constexpr size_t kMaxPrefillBytes = size_t(1) << 30;
// The kernels remembered for a program, first used first.
constexpr size_t kMaxKernels = 4096;

using Blocks = std::vector<runtime::MemoryPool::BlockCount>;

struct WarmStart {
  std::mutex mu;
  std::string dir, program;
  bool read_only = false;
  pid_t owner = 0;  // a forked child saves nothing
  std::thread thread;
  std::atomic<bool> stop{false};
  std::mutex fused_mu;                          // a store opened again (another directory) reads it again
  std::unordered_set<uint64_t> fused_last_run;  // the start keys its last run fused
  std::atomic<int64_t> preloaded{0};
  int64_t preloaded_published = 0;
  std::vector<runtime::MemoryPool::PrefillStats> prefill_published;  // per device
  std::mutex used_mu;
  std::vector<cache::Key> used;  // this run's kernels, first used first
  std::unordered_set<cache::Key, cache::KeyHash> used_set;
};

WarmStart& warm_start() {
  static auto* w = new WarmStart();  // never destroyed: the exit handler uses it
  return *w;
}

std::string kernels_identity(const std::string& program) { return "program=" + program + ";" + fingerprint(); }

// A device of another capacity needs another reserve (the pool stops at half of it).
std::string memory_identity(const std::string& program, int device, size_t capacity) {
  return "program=" + program + ";device=" + std::to_string(device) + ";capacity=" + std::to_string(capacity);
}

std::vector<cache::Record> read_file(const std::string& dir, const cache::RecordKind& kind, const std::string& id) {
  std::string problem;
  const std::string path = cache::record_file_path(dir, kind, id);
  std::vector<cache::Record> records = cache::read_records(path, kind, id, problem);
  if (!problem.empty()) log("cache", std::string(kind.file_prefix) + " profile '" + path + "' ignored: " + problem);
  return records;
}

void save_file(const std::string& dir, const cache::RecordKind& kind, const std::string& id,
               const std::vector<cache::Record>& records) {
  const std::string path = cache::record_file_path(dir, kind, id);
  const std::string failed = cache::write_records(path, kind, id, records);
  if (!failed.empty()) log("cache", "saving '" + path + "' failed: " + failed);
}

void make_ready(std::vector<cache::Key> kernels, std::vector<Blocks> memory, WarmStart* w) {
  // Only on a core nothing else wants: the program's own threads come first.
  become_background_thread("kiln-warmstart");
  // Kernels first: the first flush waits for them; memory faults come later in a step.
  for (const cache::Key& key : kernels) {
    if (w->stop.load(std::memory_order_relaxed)) return;
    if (preload_kernel(key)) w->preloaded.fetch_add(1, std::memory_order_relaxed);
  }
  runtime::Runtime& rt = runtime::Runtime::get();
  for (size_t d = 0; d < memory.size(); ++d) {
    if (memory[d].empty()) continue;
    const size_t bytes = rt.device(static_cast<int>(d)).memory().prefill(memory[d], kMaxPrefillBytes, w->stop);
    log("cache", "device " + std::to_string(d) + ": reserved " + std::to_string(bytes >> 20) +
                     " MiB ahead, as the last run of this program needed");
  }
}

void stop_locked(WarmStart& w) {
  w.stop.store(true);
  if (w.thread.joinable()) w.thread.join();
}

}  // namespace

void open_warm_start(const std::string& dir, const std::string& program, bool read_only) {
  WarmStart& w = warm_start();
  std::lock_guard<std::mutex> lock(w.mu);
  stop_locked(w);
  w.dir = program.empty() ? "" : dir;
  w.program = program;
  w.read_only = read_only;
  w.owner = ::getpid();
  w.stop.store(false);
  {
    std::lock_guard<std::mutex> fused_lock(w.fused_mu);
    w.fused_last_run.clear();
    if (!w.dir.empty()) {
      for (const cache::Record& r : read_file(w.dir, cache::kRecordFusedTraces, kernels_identity(program))) {
        w.fused_last_run.insert(r.key);
      }
    }
  }
  if (w.dir.empty()) return;
  std::vector<cache::Key> kernels;
  for (const cache::Record& r : read_file(w.dir, cache::kRecordKernels, kernels_identity(program))) {
    kernels.push_back(cache::Key{r.value, r.key});
  }
  runtime::Runtime& rt = runtime::Runtime::get();
  std::vector<Blocks> memory(rt.device_count());
  bool any = !kernels.empty();
  for (int d = 0; d < rt.device_count(); ++d) {
    const std::string id = memory_identity(program, d, rt.device(d).memory().capacity());
    for (const cache::Record& r : read_file(w.dir, cache::kRecordDeviceMemory, id)) {
      memory[d].push_back({static_cast<size_t>(r.key), static_cast<size_t>(r.value)});
    }
    any = any || !memory[d].empty();
  }
  if (!any) return;
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(&stop_warm_start, nullptr, nullptr); });
  w.thread = std::thread(make_ready, std::move(kernels), std::move(memory), &w);
}

bool fused_in_last_run(uint64_t start_key) {
  WarmStart& w = warm_start();
  std::lock_guard<std::mutex> lock(w.fused_mu);
  return w.fused_last_run.count(start_key) != 0;
}

void stop_warm_start() {
  WarmStart& w = warm_start();
  std::lock_guard<std::mutex> lock(w.mu);
  stop_locked(w);
}

void note_kernel_used(const cache::Key& key) {
  WarmStart& w = warm_start();
  std::lock_guard<std::mutex> lock(w.used_mu);
  if (w.used.size() < kMaxKernels && w.used_set.insert(key).second) w.used.push_back(key);
}

void save_warm_start() {
  WarmStart& w = warm_start();
  std::lock_guard<std::mutex> lock(w.mu);
  stop_locked(w);
  if (w.dir.empty() || w.read_only || w.owner != ::getpid()) return;
  {
    std::lock_guard<std::mutex> used_lock(w.used_mu);
    std::vector<cache::Record> records;
    for (const cache::Key& k : w.used) records.push_back({k.high, k.low});
    // A run that used no kernel (eager mode) keeps what an earlier run saved.
    if (!records.empty()) save_file(w.dir, cache::kRecordKernels, kernels_identity(w.program), records);
  }
  {
    std::vector<cache::Record> records;
    for (uint64_t key : fused_start_keys()) records.push_back({key, 0});
    if (!records.empty()) save_file(w.dir, cache::kRecordFusedTraces, kernels_identity(w.program), records);
  }
  runtime::Runtime& rt = runtime::Runtime::get();
  for (int d = 0; d < rt.device_count(); ++d) {
    runtime::MemoryPool& pool = rt.device(d).memory();
    std::vector<cache::Record> records;
    for (const runtime::MemoryPool::BlockCount& b : pool.needed_blocks()) {
      if (b.count > 0) records.push_back({b.bytes, b.count});
    }
    // A device this run did not use keeps what an earlier run saved.
    if (!records.empty())
      save_file(w.dir, cache::kRecordDeviceMemory, memory_identity(w.program, d, pool.capacity()), records);
  }
}

void publish_warm_start_counters() {
  WarmStart& w = warm_start();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.dir.empty()) return;  // nothing made ready (and maybe no runtime: the core's tests)
  Metrics& m = Metrics::global();
  auto add = [&](const char* key, int64_t n) {
    if (n != 0) m.add(Counter::WarmStart, key, n);
  };
  const int64_t preloaded = w.preloaded.load();
  add("preloaded_kernels", preloaded - w.preloaded_published);
  w.preloaded_published = preloaded;
  runtime::Runtime& rt = runtime::Runtime::get();
  w.prefill_published.resize(rt.device_count());
  for (int d = 0; d < rt.device_count(); ++d) {
    const runtime::MemoryPool::PrefillStats now = rt.device(d).memory().prefill_stats();
    runtime::MemoryPool::PrefillStats& before = w.prefill_published[d];
    add("prefilled_bytes", now.reserved_bytes - before.reserved_bytes);
    add("prefill_used_bytes", now.used_bytes - before.used_bytes);
    before = now;
  }
}

}  // namespace kiln::engine
