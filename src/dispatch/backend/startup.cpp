// Start-up: knobs, the runtime, the engine, fork safety, the mode switch.
#include "dispatch/backend/startup.h"

#include <Python.h>
#include <pthread.h>

#include <atomic>
#include <functional>
#include <mutex>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/sync.h"
#include "kiln/engine.h"
#include "kiln/log.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {

namespace {
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_bad_fork{false};
Settings g_settings;
std::mutex g_init_mu;

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
  set_log_channels(g_settings.log);
  runtime::RuntimeOptions opts;
  opts.device_count = g_settings.device_count;
  opts.capacity_bytes = static_cast<size_t>(g_settings.device_memory_mb) << 20;
  opts.launch_blocking = g_settings.launch_blocking;
  opts.host_wait = &wait_without_the_gil;
  runtime::Runtime::init(opts);
  engine::configure(engine::options_for(g_settings));  // throws for an unwritable KILN_DUMP_DIR
  trace::set_lazy_mode(g_settings.lazy);
  if (g_settings.lazy) engine::start_compiler_warm_up();
  pthread_atfork(nullptr, nullptr, &mark_bad_fork);
  g_initialized.store(true);
  log("runtime", "started " + std::to_string(opts.device_count) + " device(s) '" + g_settings.device_name + "', " +
                     std::to_string(g_settings.device_memory_mb) + " MiB each" +
                     (opts.launch_blocking ? ", launch blocking" : ""));
}

void warn_about_the_engine() {
  for (const std::string& w : engine::take_warnings()) TORCH_WARN(w);
}

bool is_initialized() { return g_initialized.load(std::memory_order_acquire); }

const Settings& settings() { return g_settings; }

void set_lazy_mode(bool lazy) {
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) synchronize(device(i), "mode switch");
  trace::set_lazy_mode(lazy);
  if (lazy) engine::start_compiler_warm_up();
}

bool in_bad_fork() { return g_bad_fork.load(std::memory_order_relaxed); }

}  // namespace kiln::dispatch
