// The runtime's errors as the c10 errors PyTorch users expect.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string_view>

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
