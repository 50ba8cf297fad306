#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include "kiln/thread_pool.h"

using kiln::runtime::ThreadPool;

TEST(ThreadPool, CoversTheRangeOnceInDisjointChunks) {
  ThreadPool pool(4);
  for (int64_t total : {1, 3, 7, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(total);
    pool.parallel_for(total, 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < total; ++i) ASSERT_EQ(hits[i].load(), 1) << total << " " << i;
  }
}

TEST(ThreadPool, UsesSeveralThreadsForLargeWork) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  pool.parallel_for(3000, 1000, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 3u);
}

TEST(ThreadPool, SmallWorkRunsInline) {
  ThreadPool pool(4);
  std::thread::id who;
  pool.parallel_for(10, 1000, [&](int64_t, int64_t) { who = std::this_thread::get_id(); });
  EXPECT_EQ(who, std::this_thread::get_id());
}

TEST(ThreadPool, AnExceptionReachesTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 10,
                                 [](int64_t b, int64_t) {
                                   if (b > 0) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  int64_t covered = 0;  // and the pool still works
  pool.parallel_for(100, 10, [&](int64_t b, int64_t e) { __atomic_add_fetch(&covered, e - b, __ATOMIC_RELAXED); });
  EXPECT_EQ(covered, 100);
}

// Pieces are taken as threads finish: a thread held up (here by a sleep, on
// a shared machine by another process) leaves the rest to the others.
TEST(ThreadPool, WorkMovesAwayFromASlowThread) {
  ThreadPool pool(2);
  std::mutex mu;
  std::map<std::thread::id, int> pieces_by_thread;
  std::set<int64_t> begins;
  pool.parallel_for(8000, 1000, [&](int64_t b, int64_t e) {
    EXPECT_EQ(e - b, 1000);
    if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::lock_guard<std::mutex> lock(mu);
    pieces_by_thread[std::this_thread::get_id()]++;
    begins.insert(b);
  });
  EXPECT_EQ(begins.size(), 8u);
  ASSERT_EQ(pieces_by_thread.size(), 2u);
  int fewest = std::min(pieces_by_thread.begin()->second, std::next(pieces_by_thread.begin())->second);
  EXPECT_EQ(fewest, 1);  // the sleeper ran only its own piece
}
