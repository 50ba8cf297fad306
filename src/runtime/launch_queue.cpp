// In-order launch queue with its own worker thread.
#include <pthread.h>

#include <algorithm>
#include <exception>
#include <string>

#include "kiln/runtime.h"

namespace kiln::runtime {

LaunchError::LaunchError(int device, std::string launch_name, std::string message)
    : std::runtime_error("kiln device " + std::to_string(device) + ": launch of " + launch_name +
                         " failed: " + message),
      device(device),
      launch_name(std::move(launch_name)),
      message(std::move(message)) {}

LaunchQueue::LaunchQueue(int device, HostWait host_wait)
    : device_(device), host_wait_(std::move(host_wait)), worker_([this] { worker_loop(); }) {}

LaunchQueue::~LaunchQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

uint64_t LaunchQueue::submit(std::string name, Work work, TaskKind kind) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(Item{std::move(name), std::move(work), kind});
    seq = submitted_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  work_cv_.notify_one();
  return seq;
}

void LaunchQueue::worker_loop() {
  // Named for `top -H`, perf and the tests that check each thread's priority.
  pthread_setname_np(pthread_self(), ("kiln-device" + std::to_string(device_)).substr(0, 15).c_str());
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;  // stop_ and drained
      item = std::move(items_.front());
      items_.pop_front();
    }
    std::string failure;
    std::exception_ptr cause;
    bool failed = false;
    const int64_t start = clock_ticks();
    try {
      item.work();
    } catch (const std::exception& e) {
      failed = true;
      failure = e.what();
      cause = std::current_exception();
    } catch (...) {
      failed = true;
      failure = "unknown exception";
    }
    // A task that began before the breakdown's last reset counts from there.
    const int64_t ticks = std::max<int64_t>(clock_ticks() - std::max(start, Timers::last_reset_ticks()), 0);
    item.work = nullptr;  // release captured resources before signalling completion
    {
      std::lock_guard<std::mutex> lock(mu_);
      times_.busy_ticks += ticks;
      if (item.kind == TaskKind::Fused) {
        times_.fused_ticks += ticks;
      } else if (item.kind == TaskKind::Library) {
        times_.library_ticks += ticks;
        times_.library_ticks_by_name[item.name] += ticks;
      }
      if (failed && !first_error_) {
        first_error_ = std::make_unique<LaunchError>(device_, item.name, failure);
        first_error_->cause = std::move(cause);
        has_error_.store(true, std::memory_order_release);
      }
      completed_.fetch_add(1, std::memory_order_acq_rel);
    }
    done_cv_.notify_all();
  }
}

void LaunchQueue::wait_for(uint64_t seq) {
  if (completed() >= seq) return;
  auto wait = [&] {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return completed() >= seq; });
  };
  wait_host(wait);
}

void LaunchQueue::wait_host(const std::function<void()>& wait) const {
  // Every host wait for a device passes here: the one place they are timed.
  const TimeScope timing(TimeCategory::HostWait);
  if (host_wait_) host_wait_(wait);
  else wait();
}

void LaunchQueue::raise_pending_error() {
  if (!has_error_.load(std::memory_order_acquire)) return;
  std::unique_ptr<LaunchError> err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    err = std::move(first_error_);
    has_error_.store(false, std::memory_order_release);
  }
  if (err) throw LaunchError(*err);
}

DeviceTimes LaunchQueue::times() const {
  std::lock_guard<std::mutex> lock(mu_);
  return times_;
}

void LaunchQueue::reset_times() {
  std::lock_guard<std::mutex> lock(mu_);
  times_ = {};
}

void LaunchQueue::synchronize() {
  wait_for(submitted());
  raise_pending_error();
}

}  // namespace kiln::runtime
