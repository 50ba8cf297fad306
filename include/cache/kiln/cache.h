// Executable keys and the in-memory executable cache.
//
// A key is XXH3-128 over the canonical Kernel IR bytes and the environment
// fingerprint (codegen version, LLVM version, CPU, code-changing knobs): a
// 128-bit key because a collision would run the wrong machine code. The entry
// keeps the relocatable object bytes next to the loaded executable, ready for
// the persistent store of the next issue. No torch, no LLVM.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kiln/runtime.h"

namespace kiln::cache {
template <typename Value>
class LruMap;
}  // namespace kiln::cache

namespace kiln::cache {

struct Key {
  uint64_t low = 0, high = 0;
  bool operator==(const Key&) const = default;
  std::string hex() const;  // 32 hex digits, high word first
};

// For hash maps keyed by Key: its bits are already a good hash.
struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(k.low); }
};

Key make_key(std::string_view kernel_bytes, std::string_view fingerprint);
// The kernel alone, without the environment: the same in every environment
// that builds it. Never a key of code (a store entry records it so that a
// miss can find the same kernel built for another environment and say why).
Key kernel_identity(std::string_view kernel_bytes);

struct Entry {
  std::string object;  // relocatable object bytes
  std::shared_ptr<runtime::Executable> executable;
  double compile_ms = 0;
};

class MemoryCache {
 public:
  // Each loaded kernel holds a few memory mappings of its own (its code and
  // data pages), and Linux gives a process 65,530 (vm.max_map_count): a
  // process that kept every kernel of ever new programs ran out after about
  // 20,000 (mmap fails, then loading a kernel does). Past the capacity the
  // least recently used executable is dropped; its code is unloaded when its
  // last holder (a plan that uses it, a queued launch) lets it go.
  static constexpr size_t kCapacity = 4096;

  explicit MemoryCache(size_t capacity = kCapacity);
  ~MemoryCache();

  // The entry for `key`, built by `build` on a miss. Concurrent callers for a
  // key being built wait for it instead of compiling it again; if `build`
  // throws, the error reaches every waiter and the key stays absent.
  std::shared_ptr<const Entry> get_or_build(const Key& key, const std::function<Entry()>& build, bool* hit = nullptr);
  // Whether `key` is present or being built.
  bool contains(const Key& key) const;
  // Adds `entry` for `key` unless the key is present or being built (a
  // warm start's preload racing a flush): whether it was added.
  bool insert_if_absent(const Key& key, Entry entry);
  size_t size() const;
  // Executables dropped to stay within the capacity, since the start.
  uint64_t evictions() const;
  void clear();

 private:
  struct Slot;
  mutable std::mutex mu_;
  std::unique_ptr<LruMap<std::shared_ptr<Slot>>> slots_;
};

}  // namespace kiln::cache
