// The threads a compiled kernel splits its work over (KILN_NUM_THREADS).
// Part of the runtime: a real accelerator would not need it. No torch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::runtime {

class ThreadPool {
 public:
  // `threads` counts the caller: ThreadPool(1) starts no thread.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs fn(begin, end) over disjoint ranges covering [0, total), each a
  // multiple of `grain` long (but the last), on up to threads() threads; the
  // caller is one of them. The ranges are fixed by (total, grain, threads())
  // alone; threads take the next one as they finish, up to kPiecesPerThread
  // per thread, so a thread slowed by another process hands its share on.
  // Returns when all are done; rethrows the first exception. While another
  // call is running (another device's queue), runs inline.
  void parallel_for(int64_t total, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  static constexpr int64_t kPiecesPerThread = 4;

 private:
  void worker_loop(int index);
  void run_pieces();

  std::vector<std::thread> workers_;
  std::mutex busy_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  // The current job (guarded by mu_ while it is set up).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t total_ = 0, step_ = 0, pieces_ = 0;
  std::atomic<int64_t> next_piece_{0};
  int helpers_ = 0;  // workers taking part in the current job
  int pending_ = 0;
  std::exception_ptr error_;
};

}  // namespace kiln::runtime
