// XXH3-128 keys and the in-memory executable cache (see include/cache/kiln/cache.h).
#include <xxhash.h>

#include <condition_variable>
#include <cstdio>
#include <exception>

#include "kiln/cache.h"
#include "kiln/lru.h"

namespace kiln::cache {

std::string Key::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return buf;
}

Key make_key(std::string_view kernel_bytes, std::string_view fingerprint) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  // Length-prefixed so that no split of the same bytes collides.
  const uint64_t n = kernel_bytes.size();
  XXH3_128bits_update(state, &n, sizeof(n));
  XXH3_128bits_update(state, kernel_bytes.data(), kernel_bytes.size());
  XXH3_128bits_update(state, fingerprint.data(), fingerprint.size());
  XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return {h.low64, h.high64};
}

Key kernel_identity(std::string_view kernel_bytes) { return make_key(kernel_bytes, ""); }

struct MemoryCache::Slot {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::shared_ptr<const Entry> entry;
  std::exception_ptr error;
};

MemoryCache::MemoryCache(size_t capacity) : slots_(std::make_unique<LruMap<std::shared_ptr<Slot>>>(capacity)) {}

MemoryCache::~MemoryCache() = default;

std::shared_ptr<const Entry> MemoryCache::get_or_build(const Key& key, const std::function<Entry()>& build, bool* hit) {
  std::shared_ptr<Slot> slot;
  bool builder = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::shared_ptr<Slot>* found = slots_->find(key)) {
      slot = *found;
    } else {
      slot = std::make_shared<Slot>();
      slots_->insert(key, slot);  // may drop the least recently used
      builder = true;
    }
  }
  if (hit) *hit = !builder;
  if (builder) {
    try {
      auto entry = std::make_shared<const Entry>(build());
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->entry = std::move(entry);
      slot->done = true;
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        std::shared_ptr<Slot>* found = slots_->find(key);
        if (found && *found == slot) slots_->erase(key);  // not a later builder's slot
      }
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->error = std::current_exception();
      slot->done = true;
    }
    slot->cv.notify_all();
  }
  std::unique_lock<std::mutex> lock(slot->mu);
  slot->cv.wait(lock, [&] { return slot->done; });
  if (slot->error) std::rethrow_exception(slot->error);
  return slot->entry;
}

bool MemoryCache::contains(const Key& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_->find(key) != nullptr;
}

bool MemoryCache::insert_if_absent(const Key& key, Entry entry) {
  auto slot = std::make_shared<Slot>();
  slot->entry = std::make_shared<const Entry>(std::move(entry));
  slot->done = true;
  std::lock_guard<std::mutex> lock(mu_);
  if (slots_->find(key) != nullptr) return false;
  slots_->insert(key, std::move(slot));
  return true;
}

size_t MemoryCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_->size();
}

uint64_t MemoryCache::evictions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_->evictions();
}

void MemoryCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  slots_->clear();
}

}  // namespace kiln::cache
