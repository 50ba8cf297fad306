// Plans reused across flushes (internal to src/engine): a steady-state loop
// flushes traces of one structure again and again, so its plans, and the
// executables their kernels resolved to, are looked up by the hash of
// fusion::plan_signature instead of being made again.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/cache.h"
#include "kiln/fusion.h"
#include "kiln/lru.h"

namespace kiln::engine {

// A plan with the executables of its kernels, reused by every later flush of
// a trace with the same signature: a steady-state loop skips planning and
// kernel hashing after its first iterations.
struct PreparedPlan {
  struct Kernel {
    std::shared_ptr<const cache::Entry> entry;  // null where the kernel's work is 0
    std::string name;
  };
  fusion::Plan plan;
  std::vector<Kernel> kernels;  // parallel to plan.kernels
  // Every kernel was built or loaded when the plan was made (none was
  // queued for the compile thread): a library-tier trace that finds it runs
  // fused next time without a wait (flush.cpp, TraceHistory).
  bool ready = false;
  // No kernel of the plan holds two ops or more, and the trace is not hot
  // yet (flush.cpp, compile_threshold_for): the plan holds no kernels.
  bool fuses_nothing = false;
};

class PlanCache {
 public:
  // Plenty for the distinct trace structures of a training loop; a workload
  // of ever new shapes drops the least recently used plans instead of
  // growing without bound (and lets go of their executables).
  static constexpr size_t kCapacity = 512;

  std::shared_ptr<const PreparedPlan> find(const cache::Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<const PreparedPlan>* found = plans_.find(key);
    return found ? *found : nullptr;
  }
  void insert(const cache::Key& key, std::shared_ptr<const PreparedPlan> plan) {
    std::lock_guard<std::mutex> lock(mu_);
    plans_.insert(key, std::move(plan));
  }
  uint64_t evictions() {
    std::lock_guard<std::mutex> lock(mu_);
    return plans_.evictions();
  }

 private:
  std::mutex mu_;
  cache::LruMap<std::shared_ptr<const PreparedPlan>> plans_{kCapacity};
};

inline PlanCache& plan_cache() {
  static auto* c = new PlanCache();  // never destroyed, like the executables it holds
  return *c;
}

}  // namespace kiln::engine
