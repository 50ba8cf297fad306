#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "kiln/cache.h"

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
