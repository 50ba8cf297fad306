// Per-device recorders and the recording mode (see include/trace/kiln/recorder.h).
#include "kiln/recorder.h"

#include <array>

#include "kiln/hash_mix.h"

namespace kiln::trace {
namespace {
std::atomic<bool> g_lazy{true};
}  // namespace

bool lazy_mode() { return g_lazy.load(std::memory_order_relaxed); }
void set_lazy_mode(bool lazy) { g_lazy.store(lazy, std::memory_order_relaxed); }

int32_t PendingTrace::buffer(void* base, size_t nbytes, bool fresh, const std::shared_ptr<void>& keepalive) {
  auto it = live_.find(base);
  if (it != live_.end() && !adopted_.count(base)) {
    Buffer& b = trace_.buffers[it->second];
    if (nbytes > b.nbytes) b.nbytes = nbytes;
    if (!b.fresh && !b.keepalive) b.keepalive = keepalive;
    return it->second;
  }
  Buffer b;
  b.base = base;
  b.nbytes = nbytes;
  b.fresh = fresh;
  if (auto adopted = adopted_.find(base); adopted != adopted_.end()) {
    b.memory_of = adopted->second;
    adopted_.erase(adopted);
  }
  if (!fresh) b.keepalive = keepalive;
  trace_.buffers.push_back(std::move(b));
  const auto id = static_cast<int32_t>(trace_.buffers.size()) - 1;
  live_[base] = id;  // an adopting output's base may still name the buffer it took the memory of
  if (!fresh && keepalive) held_by_size_[nbytes].push_back(id);
  return id;
}

bool PendingTrace::on_free(void* base, const std::function<void(void*)>& free_later) {
  auto it = live_.find(base);
  if (it == live_.end()) return false;
  Buffer& b = trace_.buffers[it->second];
  live_.erase(it);  // the pool may hand the same address out again
  if (b.fresh) b.dead = true;
  if (b.memory_of < 0) return false;
  b.keepalive = std::shared_ptr<void>(base, free_later);
  return true;
}

Trace PendingTrace::take(bool cut, bool chain) {
  Trace t = std::move(trace_);
  trace_ = Trace{};
  if (chain) {
    for (const TraceOp& op : t.ops) t.chain_key = mix_in(t.chain_key, op_hash(op));
  }
  if (cut) continuation_ = Continuation{t.start_key, t.counts_only, t.chain_key, ops_before_ + t.ops.size()};
  else continuation_.reset();
  ops_before_ = 0;
  // The next trace is likely as long: room for its ops up front, so that
  // recording does not move every op again each time the list doubles
  // (a TraceOp keeps its lists inline and is large to move).
  trace_.ops.reserve(t.ops.size());
  live_.clear();
  held_by_size_.clear();
  adopted_.clear();
  return t;
}

void Recorder::drain_deferred_frees() {
  if (!has_deferred_.load(std::memory_order_acquire)) return;
  std::vector<void*> ptrs;
  {
    std::lock_guard<std::mutex> g(deferred_mu_);
    ptrs.swap(deferred_);
    has_deferred_.store(false, std::memory_order_relaxed);
  }
  for (void* p : ptrs) {
    if (!pending_.on_free(p, free_later())) device_.free(p);
  }
}

std::function<void(void*)> Recorder::free_later() {
  return [&dev = device_](void* p) { dev.free(p); };
}

void Recorder::free(void* ptr) {
  // Eager mode records nothing (a mode switch flushes first), but frees
  // deferred during that flush still wait in the list.
  if (lazy_mode() || has_deferred_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
      std::lock_guard<std::mutex> g(deferred_mu_);
      deferred_.push_back(ptr);
      has_deferred_.store(true, std::memory_order_release);
      return;
    }
    drain_deferred_frees();
    if (pending_.on_free(ptr, free_later())) return;
  }
  device_.free(ptr);
}

void* Recorder::adopt_held_block(size_t nbytes, const std::function<void*(const std::shared_ptr<void>&)>& take) {
  // The newest few of this size: older ones are mostly weights, held elsewhere.
  constexpr int kTries = 8;
  auto lock = hold();
  drain_deferred_frees();
  auto it = pending_.held_by_size_.find(nbytes);
  if (it == pending_.held_by_size_.end()) return nullptr;
  std::vector<int32_t>& ids = it->second;
  for (int tried = 0, i = static_cast<int>(ids.size()) - 1; i >= 0 && tried < kTries; --i, ++tried) {
    Buffer& b = pending_.trace_.buffers[ids[i]];
    if (!b.keepalive) continue;
    void* memory = take(b.keepalive);
    if (memory == nullptr) continue;
    pending_.adopted_.emplace(memory, ids[i]);
    ids.erase(ids.begin() + i);  // no longer a candidate: its memory is handed out once
    return memory;
  }
  return nullptr;
}

size_t Recorder::pending() {
  auto lock = hold();
  drain_deferred_frees();
  return pending_.size();
}

bool Recorder::pending_for_fusing() {
  auto lock = hold();
  return pending_.size() != 0 && !pending_.ran_as_library();
}

Recorder& recorder(int index) {
  static std::array<std::atomic<Recorder*>, runtime::kMaxDevices> recorders{};
  static std::mutex mu;
  std::atomic<Recorder*>& slot = recorders.at(static_cast<size_t>(index));
  if (Recorder* r = slot.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(mu);
  Recorder* r = slot.load(std::memory_order_relaxed);
  if (r == nullptr) {
    r = new Recorder(runtime::Runtime::get().device(index));  // never destroyed: see the header
    slot.store(r, std::memory_order_release);
  }
  return *r;
}

}  // namespace kiln::trace
