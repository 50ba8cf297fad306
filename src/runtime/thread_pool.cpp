// Fixed pool with static chunking: chunk c of n covers [c*total/n, (c+1)*total/n).
#include "kiln/thread_pool.h"

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

void ThreadPool::run_chunk(int64_t chunk) {
  const int64_t begin = total_ * chunk / chunks_, end = total_ * (chunk + 1) / chunks_;
  try {
    if (begin < end) (*fn_)(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= chunks_) continue;  // this job has fewer chunks than threads
    }
    run_chunk(index);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t total, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  const int64_t chunks = std::min<int64_t>(threads(), std::max<int64_t>(1, total / std::max<int64_t>(grain, 1)));
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (chunks <= 1 || !busy.owns_lock()) {
    fn(0, total);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    total_ = total;
    chunks_ = chunks;
    pending_ = static_cast<int>(chunks) - 1;
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
  run_chunk(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace kiln::runtime
