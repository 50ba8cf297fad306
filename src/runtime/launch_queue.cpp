// In-order launch queue with its own worker thread.
#include <exception>

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

uint64_t LaunchQueue::submit(std::string name, Work work) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(Item{std::move(name), std::move(work)});
    seq = submitted_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  work_cv_.notify_one();
  return seq;
}

void LaunchQueue::worker_loop() {
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
    item.work = nullptr;  // release captured resources before signalling completion
    {
      std::lock_guard<std::mutex> lock(mu_);
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

void LaunchQueue::synchronize() {
  wait_for(submitted());
  raise_pending_error();
}

}  // namespace kiln::runtime
