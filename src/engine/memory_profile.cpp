// Device memory reserved ahead of a warm start (see memory_profile.h).
#include "engine/memory_profile.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/log.h"
#include "kiln/metrics.h"
#include "kiln/record_file.h"
#include "kiln/runtime.h"

namespace kiln::engine {
namespace {

struct Profile {
  std::mutex mu;
  std::string dir, program;
  bool read_only = false;
  pid_t owner = 0;  // a forked child saves nothing
  std::thread thread;
  std::atomic<bool> stop{false};
  std::vector<runtime::MemoryPool::PrefillStats> published;  // per device, what the metrics already have
};

Profile& profile() {
  static auto* p = new Profile();  // never destroyed: the exit handler uses it
  return *p;
}

// A program's reserve is at most this (and half the device's capacity): a
// long-lived process (a test suite) needs many sizes over its life, and all
// of them at start would be a lot of memory for little gain.
constexpr size_t kMaxPrefillBytes = size_t(1) << 30;

// One file per program and device: a device of another capacity needs
// another reserve (the pool stops at half of it).
std::string identity(const std::string& program, int device, size_t capacity) {
  return "program=" + program + ";device=" + std::to_string(device) + ";capacity=" + std::to_string(capacity);
}

void prefill(std::vector<std::vector<runtime::MemoryPool::BlockCount>> per_device, std::atomic<bool>* stop) {
  // Only on a core nothing else wants: the program's own threads come first.
  sched_param none{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
  runtime::Runtime& rt = runtime::Runtime::get();
  for (size_t d = 0; d < per_device.size(); ++d) {
    if (per_device[d].empty()) continue;
    const size_t bytes = rt.device(static_cast<int>(d)).memory().prefill(per_device[d], kMaxPrefillBytes, *stop);
    log("cache", "device " + std::to_string(d) + ": reserved " + std::to_string(bytes >> 20) +
                     " MiB ahead, as its last run of this program needed");
  }
}

void stop_locked(Profile& p) {
  p.stop.store(true);
  if (p.thread.joinable()) p.thread.join();
}

}  // namespace

void open_memory_profile(const std::string& dir, const std::string& program, bool read_only) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  stop_locked(p);
  p.dir = program.empty() ? "" : dir;
  p.program = program;
  p.read_only = read_only;
  p.owner = ::getpid();
  p.stop.store(false);
  if (p.dir.empty()) return;
  runtime::Runtime& rt = runtime::Runtime::get();
  std::vector<std::vector<runtime::MemoryPool::BlockCount>> per_device(rt.device_count());
  bool any = false;
  for (int d = 0; d < rt.device_count(); ++d) {
    const size_t capacity = rt.device(d).memory().capacity();
    std::string problem;
    const std::string path = cache::record_file_path(p.dir, cache::kRecordDeviceMemory, identity(program, d, capacity));
    for (const cache::Record& r :
         cache::read_records(path, cache::kRecordDeviceMemory, identity(program, d, capacity), problem)) {
      per_device[d].push_back({static_cast<size_t>(r.key), static_cast<size_t>(r.value)});
    }
    if (!problem.empty()) log("cache", "memory profile '" + path + "' ignored: " + problem);
    any = any || !per_device[d].empty();
  }
  if (!any) return;
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(&stop_memory_prefill, nullptr, nullptr); });
  p.thread = std::thread(prefill, std::move(per_device), &p.stop);
}

void stop_memory_prefill() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  stop_locked(p);
}

void save_memory_profile() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  stop_locked(p);
  if (p.dir.empty() || p.read_only || p.owner != ::getpid()) return;
  runtime::Runtime& rt = runtime::Runtime::get();
  for (int d = 0; d < rt.device_count(); ++d) {
    runtime::MemoryPool& pool = rt.device(d).memory();
    std::vector<cache::Record> records;
    for (const runtime::MemoryPool::BlockCount& b : pool.needed_blocks()) {
      if (b.count > 0) records.push_back({b.bytes, b.count});
    }
    if (records.empty()) continue;  // a device this run did not use keeps what an earlier run saved
    const std::string id = identity(p.program, d, pool.capacity());
    const std::string path = cache::record_file_path(p.dir, cache::kRecordDeviceMemory, id);
    const std::string failed = cache::write_records(path, cache::kRecordDeviceMemory, id, records);
    if (!failed.empty()) log("cache", "saving the memory profile to '" + path + "' failed: " + failed);
  }
}

void publish_memory_prefill_counters() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.dir.empty()) return;  // nothing reserved ahead (and maybe no runtime: the core's tests)
  runtime::Runtime& rt = runtime::Runtime::get();
  p.published.resize(rt.device_count());
  for (int d = 0; d < rt.device_count(); ++d) {
    const runtime::MemoryPool::PrefillStats now = rt.device(d).memory().prefill_stats();
    runtime::MemoryPool::PrefillStats& before = p.published[d];
    Metrics::global().add(Counter::WarmStart, "prefilled_bytes", now.reserved_bytes - before.reserved_bytes);
    Metrics::global().add(Counter::WarmStart, "prefill_used_bytes", now.used_bytes - before.used_bytes);
    before = now;
  }
}

}  // namespace kiln::engine
