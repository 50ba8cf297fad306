// The runtime's errors as the c10 errors PyTorch users expect, and warnings
// held for the thread that raises them.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string_view>
#include <vector>

#include "kiln/runtime.h"

namespace kiln::dispatch {

// Converts runtime errors (launch failures, out of memory) thrown by `fn` into
// the c10 errors eager raises for them.
template <class F>
decltype(auto) with_torch_errors(F&& fn);

// Runs `fn`, which may deliver a device's launch error (a sync point, a
// blocking launch): the error is counted and logged under `reason`, and
// raised as the c10 error eager would raise.
template <class F>
decltype(auto) delivering_launch_errors(std::string_view reason, F&& fn);

// Keeps the warnings raised while it is installed (on any thread), for
// release() to hand to the handler current on the thread that calls it.
class HeldWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { held_.push_back(warning); }
  void release() {
    for (const c10::Warning& w : held_) c10::warn(w);
    held_.clear();
  }

 private:
  std::vector<c10::Warning> held_;
};

[[noreturn]] void rethrow_as_torch_error(const std::exception& e);
void count_delivered_error(const runtime::LaunchError& e, std::string_view reason);

template <class F>
decltype(auto) with_torch_errors(F&& fn) {
  try {
    return fn();
  } catch (const c10::Error&) {
    throw;
  } catch (const runtime::OutOfMemoryError& e) {
    rethrow_as_torch_error(e);
  } catch (const runtime::LaunchError& e) {
    rethrow_as_torch_error(e);
  }
}

template <class F>
decltype(auto) delivering_launch_errors(std::string_view reason, F&& fn) {
  return with_torch_errors([&]() -> decltype(auto) {
    try {
      return fn();
    } catch (const runtime::LaunchError& e) {
      count_delivered_error(e, reason);
      throw;
    }
  });
}

}  // namespace kiln::dispatch
