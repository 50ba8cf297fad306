// The background compile thread and the executables that wait for it (see
// background_compiles.h).
#include "engine/background_compiles.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <thread>

#include "kiln/background_thread.h"
#include "kiln/engine.h"
#include "kiln/metrics.h"

namespace kiln::engine {
namespace {

struct Compiles {
  std::mutex mu;
  std::condition_variable wake, idle;
  struct Queued {
    std::function<void()> compile;
    const void* waiter = nullptr;  // the DeferredExecutable it resolves, if any
  };
  std::deque<Queued> queue;
  // Compiles taken from the queue and not done yet: by the compile thread,
  // or by a waiting device (hurry). `idle` is told when none is left.
  int in_flight = 0;
  bool stopping = false;
  std::thread thread;
};

// Never destroyed: flushes may queue compiles during shutdown, until the
// exit handler finishes them.
Compiles& compiles() {
  static auto* c = new Compiles();
  return *c;
}

// Caller holds c.mu.
void done_one(Compiles& c) {
  if (--c.in_flight == 0 && c.queue.empty()) c.idle.notify_all();
}

void compile_loop(Compiles* c) {
  // A first occurrence runs as library kernels while its fused kernels
  // compile; a launch that needs a kernel still compiling blocks the
  // device's worker, which frees a core for the compile.
  become_background_thread("kiln-compile");
  std::unique_lock<std::mutex> lock(c->mu);
  for (;;) {
    c->wake.wait(lock, [&] { return c->stopping || !c->queue.empty(); });
    if (c->queue.empty()) return;  // stopping, nothing left
    std::function<void()> compile = std::move(c->queue.front().compile);
    c->queue.pop_front();
    ++c->in_flight;
    lock.unlock();
    compile();  // never throws: a compile's error goes to its DeferredExecutable
    lock.lock();
    done_one(*c);
  }
}

}  // namespace

void compile_in_background(std::function<void()> compile, const DeferredExecutable* resolves) {
  Compiles& c = compiles();
  std::lock_guard<std::mutex> lock(c.mu);
  c.queue.push_back({std::move(compile), resolves});
  if (!c.thread.joinable()) {
    static std::once_flag registered;
    std::call_once(registered, [] {
      pthread_atfork(&finish_background_compiles, nullptr, nullptr);
      std::atexit(&finish_background_compiles);
    });
    c.stopping = false;
    c.thread = std::thread(compile_loop, &c);
  }
  c.wake.notify_one();
}

void finish_background_compiles() {
  Compiles& c = compiles();
  std::thread finished;
  {
    std::unique_lock<std::mutex> lock(c.mu);
    if (!c.thread.joinable()) return;
    c.stopping = true;  // the loop ends once the queue is empty
    c.wake.notify_one();
    finished = std::move(c.thread);
  }
  finished.join();
}

void wait_for_background_compiles() {
  // The thread stays up: the program goes on compiling.
  Compiles& c = compiles();
  std::unique_lock<std::mutex> lock(c.mu);
  c.idle.wait(lock, [&] { return c.queue.empty() && c.in_flight == 0; });
}

// A compile the device now waits for runs at once, on the waiting thread:
// not behind those queued for later occurrences (the library tier queues a
// trace's kernels one or two occurrences ahead), and not at the compile
// thread's idle priority, which would wait for every other runnable thread
// of the machine (a data loader's workers, another process) while the
// device waits. (A thread cannot take back the priority it gave up without
// privileges.) One already running on the compile thread is waited for.
void hurry(const DeferredExecutable* waiter) {
  Compiles& c = compiles();
  std::function<void()> compile;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto it = c.queue.begin(); it != c.queue.end(); ++it) {
      if (it->waiter != waiter) continue;
      compile = std::move(it->compile);
      c.queue.erase(it);
      ++c.in_flight;
      break;
    }
  }
  if (!compile) return;
  compile();  // never throws: its error goes to its DeferredExecutable
  std::lock_guard<std::mutex> lock(c.mu);
  done_one(c);
}

void DeferredExecutable::run(const runtime::LaunchArgs& args) {
  std::shared_ptr<runtime::Executable> built;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!built_ && !error_) {
      // The device waits from here, whether it compiles the kernel itself
      // (hurry) or waits for the compile thread's.
      const auto start = std::chrono::steady_clock::now();
      lock.unlock();
      hurry(this);  // not under mu_: the compile, here or on the compile thread, resolves under mu_
      lock.lock();
      done_.wait(lock, [&] { return built_ || error_; });
      const auto us =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
      Metrics::global().add(Counter::CompileTime, "device_wait_us", us);
    }
    if (error_) std::rethrow_exception(error_);
    built = built_;
  }
  built->run(args);
}

void DeferredExecutable::resolve(std::shared_ptr<runtime::Executable> built) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    built_ = std::move(built);
  }
  done_.notify_all();
}

void DeferredExecutable::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
  }
  done_.notify_all();
}

}  // namespace kiln::engine
