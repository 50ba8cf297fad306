// The adaptive policy's memory (flush.cpp): how often each trace structure
// was seen, and per start key how far its trace is from running fused.
// Counts and program order, never timing.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/cache.h"
#include "kiln/hash_mix.h"
#include "kiln/runtime.h"

namespace kiln::engine {

// KILN_COMPILE_THRESHOLD's count: how often each trace structure (its fused
// plan's key) was flushed while its fused kernels were not cached. Bounded:
// past the bound the counts start again, so a workload of that many
// distinct traces compiles later, never differently.
class Occurrences {
 public:
  int64_t next(const cache::Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    if (counts_.size() >= kMaxTraces) counts_.clear();
    return ++counts_[key];
  }

 private:
  static constexpr size_t kMaxTraces = size_t{1} << 16;
  std::mutex mu_;
  std::unordered_map<cache::Key, int64_t, cache::KeyHash> counts_;
};

inline Occurrences& occurrences() {
  static auto* o = new Occurrences();
  return *o;
}

// What a library-tier flush did for its trace's next occurrences.
enum class Prepared {
  Nothing,  // below KILN_COMPILE_THRESHOLD: nothing compiled
  Queued,   // its fused kernels are queued for the compile thread (or were, by an earlier trace)
  Ready,    // its fused kernels are built (compiled in the flush, or in memory already)
};

// The adaptive policy's memory: per start key (Trace::start_key), how far
// its trace is from running fused, and per device the plan key of the trace
// it flushed last, which tells the trace after it apart. A trace whose
// kernels were queued runs fused once the program has waited for the
// device since (a step's end, most often): its compile has had the time
// the program took to get there. Until then it runs as library kernels,
// once at most, so that a program that never waits is fused too: a fused
// occurrence right behind the queueing would stall the device on the
// compile (gpt_train's first step, whose layers repeat its traces). Counts
// and program order, never timing. Bounded: past the bound the memory
// starts again, and those traces run as library kernels again for an
// occurrence or two, never differently.
class TraceHistory {
 public:
  // The key of a trace whose first op is `first_op`, and whether it runs fused.
  TraceStart start(int device, uint64_t first_op) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto d = static_cast<size_t>(device);
    TraceStart s;
    s.key = mix_in(mix_in(0, last_[d]), first_op);
    auto it = state_.find(s.key);
    const bool fused = it != state_.end() && (it->second.state == State::Fused ||
                                              (it->second.state == State::Queued && it->second.waits < waits_[d]));
    s.ran_as_library = !fused;
    return s;
  }
  void waited(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    ++waits_[static_cast<size_t>(device)];
  }
  // The keys that ran fused or had their kernels queued (saved for the next run: warm_start.h).
  std::vector<uint64_t> fused_keys() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t> keys;
    for (const auto& [key, entry] : state_) keys.push_back(key);  // no entry stays Unseen
    return keys;
  }
  // Every flush: the trace that follows it on `device` is told apart by
  // `told_apart_by` (after_trace), and its own key is now `prepared` that
  // far from running fused (a fused trace: Ready).
  void flushed(int device, uint64_t told_apart_by, uint64_t start, Prepared prepared) {
    std::lock_guard<std::mutex> lock(mu_);
    last_[static_cast<size_t>(device)] = told_apart_by;
    if (prepared == Prepared::Nothing) return;
    if (state_.size() >= kMaxTraces) state_.clear();
    Entry& e = state_[start];  // a new entry starts Unseen
    e.state = prepared == Prepared::Ready || e.state == State::Queued ? State::Fused : State::Queued;
    e.waits = waits_[static_cast<size_t>(device)];
  }

 private:
  enum class State : uint8_t { Unseen, Queued, Fused };
  struct Entry {
    State state = State::Unseen;
    uint64_t waits = 0;  // the device's waits when its kernels were queued
  };
  static constexpr size_t kMaxTraces = size_t{1} << 16;
  std::mutex mu_;
  std::array<uint64_t, runtime::kMaxDevices> last_{};
  std::array<uint64_t, runtime::kMaxDevices> waits_{};  // the program's waits for each device
  std::unordered_map<uint64_t, Entry> state_;
};

inline TraceHistory& history() {
  static auto* h = new TraceHistory();
  return *h;
}

}  // namespace kiln::engine
