// Start-up: knobs, the runtime, fork safety, and the device-wide helpers of neuron.h.
#include <Python.h>
#include <pthread.h>

#include <atomic>
#include <iostream>
#include <mutex>

#include "dispatch/lazy.h"
#include "dispatch/neuron.h"
#include "kiln/engine.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {

namespace {
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_bad_fork{false};
Settings g_settings;
std::mutex g_init_mu;
thread_local c10::DeviceIndex t_current_device = 0;

void mark_bad_fork() { g_bad_fork.store(true); }

// The runtime's waits let go of the GIL: a launch may need it (a
// Python-registered kernel, or dropping a tensor a Python object owns).
void wait_without_the_gil(const std::function<void()>& wait) {
  if (!Py_IsInitialized() || !PyGILState_Check()) {
    wait();
    return;
  }
  struct Released {
    PyThreadState* saved = PyEval_SaveThread();
    ~Released() { PyEval_RestoreThread(saved); }
  } released;
  wait();
}
}  // namespace

void initialize() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_initialized.load()) return;
  g_settings = parse_settings();  // throws KnobError
  runtime::RuntimeOptions opts;
  opts.device_count = g_settings.device_count;
  opts.capacity_bytes = static_cast<size_t>(g_settings.device_memory_mb) << 20;
  opts.launch_blocking = g_settings.launch_blocking;
  opts.host_wait = &wait_without_the_gil;
  runtime::Runtime::init(opts);
  configure_lazy_mode();  // throws for an unwritable KILN_DUMP_DIR
  trace::set_lazy_mode(g_settings.lazy);
  if (g_settings.lazy) engine::start_compiler_warm_up();
  pthread_atfork(nullptr, nullptr, &mark_bad_fork);
  g_initialized.store(true);
  log("runtime", "started " + std::to_string(opts.device_count) + " device(s) '" + g_settings.device_name + "', " +
                     std::to_string(g_settings.device_memory_mb) + " MiB each" +
                     (opts.launch_blocking ? ", launch blocking" : ""));
}

bool is_initialized() { return g_initialized.load(std::memory_order_acquire); }

const Settings& settings() { return g_settings; }

void set_lazy_mode(bool lazy) {
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) synchronize(device(i), "mode switch");
  trace::set_lazy_mode(lazy);
  if (lazy) engine::start_compiler_warm_up();
}

bool in_bad_fork() { return g_bad_fork.load(std::memory_order_relaxed); }

std::string device_string(c10::DeviceIndex index) {
  return g_settings.device_name + ":" + std::to_string(index);
}

c10::DeviceIndex device_count() {
  return is_initialized() ? static_cast<c10::DeviceIndex>(g_settings.device_count) : 0;
}

c10::DeviceIndex current_device() { return t_current_device; }

runtime::Device& device(c10::DeviceIndex index) {
  TORCH_CHECK(is_initialized(), "kiln is not initialized: import kiln (or torch with autoload on) first");
  TORCH_CHECK(!in_bad_fork(),
              "Cannot use the ", g_settings.device_name,
              " device in a forked subprocess: kiln's device queues do not survive fork. "
              "Use the 'spawn' start method (e.g. DataLoader(multiprocessing_context='spawn')).");
  if (index < 0) index = t_current_device;
  TORCH_CHECK(index < g_settings.device_count, device_string(index),
                    " is not a valid device: ", g_settings.device_count, " device(s) exist, valid are ",
                    g_settings.device_name, ":0..", g_settings.device_name, ":", g_settings.device_count - 1,
                    " (KILN_DEVICE_COUNT sets how many)");
  return runtime::Runtime::get().device(index);
}

void set_current_device(c10::DeviceIndex index) {
  device(index);  // validates
  t_current_device = index;
}

namespace {
// A launch's error as the exception type eager raises for it (IndexError
// for an index out of range), naming the device and the op.
[[noreturn]] void rethrow_launch_error(const runtime::LaunchError& e) {
  const std::string where =
      "kiln device " + std::to_string(e.device) + ": launch of " + e.launch_name + " failed: ";
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
  } catch (...) {
  }
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

void synchronize(runtime::Device& dev, std::string_view reason) {
  flush_trace(dev, reason);
  wait_for_launches(dev, reason);
}

void wait_for_launches(runtime::Device& dev, std::string_view reason) {
  Metrics::global().add(Counter::SyncPoints, reason);
  delivering_launch_errors(reason, [&] { dev.synchronize(); });
}

void enqueue(runtime::Device& dev, std::string_view name, runtime::LaunchQueue::Work work) {
  flush_trace(dev, "untraced op");  // what the program issued before this runs before it
  // What the work throws reaches the next sync point as a LaunchError
  // carrying it (rethrow_launch_error gives it back its type); with
  // KILN_LAUNCH_BLOCKING the device raises it here.
  delivering_launch_errors("launch blocking", [&] { dev.launch(std::string(name), std::move(work)); });
}

void count_delivered_error(const runtime::LaunchError& e, std::string_view reason) {
  Metrics::global().add(Counter::Errors, e.launch_name);
  log("runtime", std::string("delivering launch error at ") + std::string(reason) + ": " + e.what());
}

void log(const char* channel, const std::string& message) {
  if (!g_settings.log_enabled(channel)) return;
  std::cerr << "[kiln:" << channel << "] " << message << std::endl;
}

}  // namespace kiln::dispatch
