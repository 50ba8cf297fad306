#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "kiln/cache.h"
#include "kiln/lru.h"

using namespace kiln;

TEST(CacheKey, DependsOnKernelBytesAndFingerprint) {
  cache::Key a = cache::make_key("kernel", "llvm=19;cpu=x");
  EXPECT_EQ(a, cache::make_key("kernel", "llvm=19;cpu=x"));
  EXPECT_NE(a, cache::make_key("kernel", "llvm=19;cpu=y"));
  EXPECT_NE(a, cache::make_key("kernel2", "llvm=19;cpu=x"));
  // The boundary between the two parts is part of the key.
  EXPECT_NE(cache::make_key("ab", "c"), cache::make_key("a", "bc"));
  EXPECT_EQ(a.hex().size(), 32u);
}

TEST(MemoryCache, BuildsOnceAndHitsAfter) {
  cache::MemoryCache c;
  int builds = 0;
  auto build = [&] {
    ++builds;
    cache::Entry e;
    e.object = "obj";
    return e;
  };
  bool hit = true;
  auto first = c.get_or_build(cache::make_key("k", ""), build, &hit);
  EXPECT_FALSE(hit);
  auto second = c.get_or_build(cache::make_key("k", ""), build, &hit);
  EXPECT_TRUE(hit);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(c.size(), 1u);
}

// A warm start's preload adds what it loaded only where no flush got there
// first; a flush never waits on it (its "not stored" is no error of the key).
TEST(MemoryCache, InsertIfAbsentKeepsWhatIsThereOrBeingBuilt) {
  cache::MemoryCache c;
  const cache::Key k = cache::make_key("k", "");
  EXPECT_FALSE(c.contains(k));
  cache::Entry preloaded;
  preloaded.object = "preloaded";
  EXPECT_TRUE(c.insert_if_absent(k, preloaded));
  EXPECT_TRUE(c.contains(k));
  bool hit = false;
  auto e = c.get_or_build(k, [] { return cache::Entry{}; }, &hit);
  EXPECT_TRUE(hit);
  EXPECT_EQ(e->object, "preloaded");
  cache::Entry again;
  again.object = "again";
  EXPECT_FALSE(c.insert_if_absent(k, again));
  EXPECT_EQ(c.get_or_build(k, [] { return cache::Entry{}; })->object, "preloaded");
}

TEST(MemoryCache, ConcurrentMissesCompileOnce) {
  cache::MemoryCache c;
  std::atomic<int> builds{0};
  std::vector<std::thread> threads;
  std::vector<const cache::Entry*> seen(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      seen[t] = c.get_or_build(cache::make_key("k", ""), [&] {
                   ++builds;
                   std::this_thread::sleep_for(std::chrono::milliseconds(20));
                   return cache::Entry{};
                 }).get();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(builds.load(), 1);
  for (auto* p : seen) EXPECT_EQ(p, seen[0]);
}

TEST(MemoryCache, AFailedBuildLeavesNoEntry) {
  cache::MemoryCache c;
  auto key = cache::make_key("bad", "");
  EXPECT_THROW(c.get_or_build(key, []() -> cache::Entry { throw std::runtime_error("llvm said no"); }),
               std::runtime_error);
  EXPECT_EQ(c.size(), 0u);
  bool hit = true;
  c.get_or_build(key, [] { return cache::Entry{}; }, &hit);
  EXPECT_FALSE(hit);
}

TEST(MemoryCache, StaysBoundedAndKeepsEntriesInUseAlive) {
  cache::MemoryCache c;
  auto build = [] {
    cache::Entry e;
    e.object = "obj";
    return e;
  };
  auto held = c.get_or_build(cache::make_key("held", ""), build);
  for (size_t i = 0; i < cache::MemoryCache::kCapacity + 10; ++i) {
    c.get_or_build(cache::make_key("k" + std::to_string(i), ""), build);
    ASSERT_LE(c.size(), cache::MemoryCache::kCapacity);
  }
  EXPECT_EQ(held->object, "obj");  // evicted from the cache, alive with its holder
  bool hit = true;
  c.get_or_build(cache::make_key("held", ""), build, &hit);
  EXPECT_FALSE(hit);  // built again on the next miss
}

// Past its capacity the memory level drops the least recently used entry, not
// everything: a kernel used on every step survives a stream of new ones.
TEST(MemoryCache, PastItsCapacityTheLeastRecentlyUsedGoes) {
  cache::MemoryCache c(3);
  auto build = [] { return cache::Entry{}; };
  auto key = [](int i) { return cache::make_key("k" + std::to_string(i), ""); };
  bool hit = false;
  for (int i = 0; i < 3; ++i) c.get_or_build(key(i), build);
  c.get_or_build(key(0), build, &hit);  // k0 is now the most recently used
  EXPECT_TRUE(hit);
  c.get_or_build(key(3), build);  // drops k1, the least recently used
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.evictions(), 1u);
  for (int i : {0, 2, 3}) {
    c.get_or_build(key(i), build, &hit);
    EXPECT_TRUE(hit) << i;
  }
  c.get_or_build(key(1), build, &hit);
  EXPECT_FALSE(hit);
  EXPECT_EQ(c.evictions(), 2u);  // k1 came back in place of k0, the least recently used by then
  for (int hot = 0, fresh = 100; fresh < 200; ++fresh) {  // a hot key among ever new ones
    c.get_or_build(key(hot), build, &hit);
    c.get_or_build(key(fresh), build);
  }
  c.get_or_build(key(0), build, &hit);
  EXPECT_TRUE(hit);
}

TEST(LruMap, FindRefreshesAndInsertReplaces) {
  cache::LruMap<int> m(2);
  const cache::Key a = cache::make_key("a", ""), b = cache::make_key("b", ""), c = cache::make_key("c", "");
  m.insert(a, 1);
  m.insert(b, 2);
  ASSERT_NE(m.find(a), nullptr);
  m.insert(c, 3);  // b was the least recently used
  EXPECT_EQ(m.find(b), nullptr);
  EXPECT_EQ(*m.find(a), 1);
  m.insert(a, 10);  // replaced in place: nothing evicted
  EXPECT_EQ(*m.find(a), 10);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.evictions(), 1u);
  EXPECT_TRUE(m.erase(a));
  EXPECT_FALSE(m.erase(a));
  EXPECT_EQ(m.size(), 1u);
}
