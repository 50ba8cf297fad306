// A map from cache keys to values that holds at most `capacity` of them and,
// past that, drops the least recently used. The memory level of the
// executable cache and the engine's plan cache both use it: a workload of
// ever new kernels or plans keeps a bounded set, and a hot one is never
// dropped to make room for a cold one. Not thread-safe: its owner locks.
// No torch, no LLVM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>

#include "kiln/cache.h"

namespace kiln::cache {

template <typename Value>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity > 0 ? capacity : 1) {}

  // The value under `key`, now the most recently used; null when absent.
  Value* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);  // O(1): no allocation, no copy
    return &it->second->second;
  }

  // Stores `value` under `key` as the most recently used, replacing what was
  // there; drops the least recently used past the capacity.
  void insert(const Key& key, Value value) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    while (index_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evictions_;
    }
  }

  // Removes `key`; false when it was absent.
  bool erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    order_.erase(it->second);
    index_.erase(it);
    return true;
  }

  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }
  void clear() {
    index_.clear();
    order_.clear();
  }

 private:
  using Order = std::list<std::pair<Key, Value>>;  // most recently used first
  size_t capacity_;
  Order order_;
  std::unordered_map<Key, typename Order::iterator, KeyHash> index_;
  uint64_t evictions_ = 0;
};

}  // namespace kiln::cache
