// Runtime errors as c10 errors of eager's types.
#include "dispatch/backend/torch_errors.h"

#include <string>

#include "dispatch/backend/startup.h"
#include "kiln/metrics.h"

namespace kiln::dispatch {

namespace {
// A launch's error as the exception type eager raises for it (IndexError
// for an index out of range), naming the device and the op.
[[noreturn]] void rethrow_launch_error(const runtime::LaunchError& e) {
  const std::string where = "kiln device " + std::to_string(e.device) + ": launch of " + e.launch_name + " failed: ";
  try {
    std::rethrow_exception(e.cause);
  } catch (const c10::IndexError& c) {
    TORCH_CHECK_INDEX(false, where, c.what_without_backtrace());
  } catch (const c10::ValueError& c) {
    TORCH_CHECK_VALUE(false, where, c.what_without_backtrace());
  } catch (const c10::TypeError& c) {
    TORCH_CHECK_TYPE(false, where, c.what_without_backtrace());
  } catch (const c10::NotImplementedError& c) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, where, c.what_without_backtrace());
  } catch (const c10::LinAlgError& c) {
    TORCH_CHECK_LINALG(false, where, c.what_without_backtrace());
  } catch (const c10::OutOfMemoryError& c) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, where, c.what_without_backtrace());
  } catch (const c10::Error& c) {
    TORCH_CHECK(false, where, c.what_without_backtrace());
  } catch (const runtime::OutOfMemoryError& c) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, where, c.what());
  } catch (...) {}
  TORCH_CHECK(false, e.what());
}
}  // namespace

void rethrow_as_torch_error(const std::exception& e) {
  if (dynamic_cast<const runtime::OutOfMemoryError*>(&e) != nullptr) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
  }
  if (const auto* launch = dynamic_cast<const runtime::LaunchError*>(&e); launch != nullptr && launch->cause) {
    rethrow_launch_error(*launch);
  }
  TORCH_CHECK(false, e.what());
}

void count_delivered_error(const runtime::LaunchError& e, std::string_view reason) {
  Metrics::global().add(Counter::Errors, e.launch_name);
  log("runtime", std::string("delivering launch error at ") + std::string(reason) + ": " + e.what());
}

}  // namespace kiln::dispatch
