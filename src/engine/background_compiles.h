// The background thread that compiles new kernels for flushes that do not
// wait for them (KILN_ASYNC_COMPILE), and the executable a flush launches in
// the meantime (internal to src/engine).
//
// A flush that meets a kernel it has never built queues the compile here and
// launches a DeferredExecutable in its place: the device's in-order queue
// runs it when it gets there, waiting for the compile if it is not done
// (counted as compile_time: device_wait_us). The program's thread goes on
// recording while LLVM works. Nothing about the results changes: the same
// compiled kernel runs, in the same order, whenever the compile finishes.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/runtime.h"

namespace kiln::engine {

class DeferredExecutable;

// Runs `compile` on the background thread (started on first use), after the
// compiles queued before it; `resolves`: the DeferredExecutable it resolves,
// whose launch takes it from the queue and runs it on the waiting thread
// once the device waits for it (DeferredExecutable::run).
void compile_in_background(std::function<void()> compile, const DeferredExecutable* resolves = nullptr);

// Waits until every queued compile ran, then joins the thread (a later
// compile starts it again). Runs before a fork (a child must not inherit a
// thread that vanished holding LLVM's locks) and at exit.
void finish_background_compiles();

class DeferredExecutable final : public runtime::Executable {
 public:
  explicit DeferredExecutable(std::string name) : name_(std::move(name)) {}

  const std::string& name() const override { return name_; }
  const char* kind() const override { return "fused kernel"; }
  // Waits for the compile, then runs what it built; rethrows its error.
  void run(const runtime::LaunchArgs& args) override;

  // The compile's outcome, exactly one of them once.
  void resolve(std::shared_ptr<runtime::Executable> built);
  void fail(std::exception_ptr error);

 private:
  std::string name_;
  std::mutex mu_;
  std::condition_variable done_;
  std::shared_ptr<runtime::Executable> built_;
  std::exception_ptr error_;
};

}  // namespace kiln::engine
