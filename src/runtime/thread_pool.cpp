// Fixed pool. A job is cut into fixed pieces of `step` elements; each
// thread takes the next piece until none is left (static ranges, dynamic
// assignment: results never depend on which thread ran what).
#include "kiln/thread_pool.h"

#include <pthread.h>

#include <algorithm>

namespace kiln::runtime {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_pieces() {
  for (;;) {
    const int64_t piece = next_piece_.fetch_add(1, std::memory_order_relaxed);
    if (piece >= pieces_) return;
    const int64_t begin = piece * step_, end = std::min(total_, begin + step_);
    try {
      (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int index) {
  pthread_setname_np(pthread_self(), "kiln-pool");  // for top -H, perf and the priority test
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index > helpers_) continue;  // this job wants fewer threads
    }
    run_pieces();
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t total, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t grains = (total + grain - 1) / grain;
  const int64_t threads_used = std::min<int64_t>(threads(), std::max<int64_t>(1, total / grain));
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (threads_used <= 1 || !busy.owns_lock()) {
    fn(0, total);
    return;
  }
  const int64_t pieces_wanted = std::min<int64_t>(grains, threads() * kPiecesPerThread);
  const int64_t step = (grains + pieces_wanted - 1) / pieces_wanted * grain;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    total_ = total;
    step_ = step;
    pieces_ = (total + step - 1) / step;
    next_piece_.store(0, std::memory_order_relaxed);
    helpers_ = static_cast<int>(threads_used) - 1;
    pending_ = helpers_;
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
  run_pieces();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace kiln::runtime
