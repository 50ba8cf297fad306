// kiln._C: what the Python package needs from C++.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include <fstream>
#include <thread>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/generator.h"
#include "dispatch/backend/hooks.h"
#include "dispatch/backend/mkl_vml_dispatch.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/sync.h"
#include "dispatch/eager/library_kernel.h"
#include "kiln/engine.h"
#include "kiln/metrics.h"
#include "kiln/recorder.h"

namespace {

using namespace kiln;
using namespace kiln::dispatch;

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "host CPU";
}

// What torch.<device>.get_device_properties reports, in CUDA's field names
// where they have a meaning here.
py::dict device_properties(int index) {
  const runtime::MemoryStats s = device(index).memory().stats();
  py::dict d;
  d["name"] = "kiln emulated accelerator (host-memory device, native code for " + cpu_model_name() + ")";
  d["total_memory"] = s.capacity_bytes;
  d["multi_processor_count"] = settings().num_threads;  // the threads a compiled kernel splits over
  return d;
}

// kiln.metrics.breakdown(): seconds since the last reset, in the keys
// python/kiln/metrics.py documents (another tool's contract: keep them).
py::dict time_breakdown_dict() {
  const TimeBreakdown t = runtime::time_breakdown();
  py::dict d;
  d["wall_s"] = t.wall_s;
  d["host_record_s"] = t.host_record_s;
  d["flush_s"] = t.flush_s;
  d["compile_s"] = t.compile_s;
  d["host_wait_s"] = t.host_wait_s;
  d["host_python_s"] = t.host_python_s;
  d["fused_kernel_s"] = t.fused_kernel_s;
  d["library_kernel_s"] = t.library_kernel_s;
  py::dict by_op;
  for (const auto& [name, seconds] : t.library_kernels_by_op) by_op[py::str(name)] = seconds;
  d["library_kernels_by_op"] = by_op;
  d["device_idle_s"] = t.device_idle_s;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "kiln native extension";
  m.def("_init", [] {
    initialize();  // raises ValueError for a bad knob
    register_hooks();
    route_composite_ops_to_library_kernel();
    std::vector<std::string> warnings = unknown_knob_warnings();
    for (std::string& w : engine::take_warnings()) warnings.push_back(std::move(w));  // a refused cache directory
    return warnings;
  });
  m.def("is_initialized", &is_initialized);
  m.def("device_name", [] { return settings().device_name; });
  m.def("device_count", [] { return int(device_count()); });
  m.def("current_device", [] { return int(current_device()); });
  m.def("set_device", [](int index) { set_current_device(index); });
  m.def(
      "synchronize",
      [](int index) {
        if (index < 0) {
          for (c10::DeviceIndex i = 0; i < device_count(); ++i) synchronize(device(i), "synchronize");
        } else {
          synchronize(device(index), "synchronize");
        }
      },
      py::arg("index") = -1);
  m.def("device_properties", &device_properties, py::arg("index"));
  m.def("default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(default_generator(index)));
  });
  m.def("is_in_bad_fork", &in_bad_fork);
  m.def("launch_blocking", [] { return settings().launch_blocking; });
  m.def("mode", [] { return std::string(trace::lazy_mode() ? "lazy" : "eager"); });
  m.def("set_mode", [](const std::string& mode) {
    if (mode != "lazy" && mode != "eager") {
      throw py::value_error("kiln.set_mode: unknown mode '" + mode + "'; accepted: lazy, eager");
    }
    set_lazy_mode(mode == "lazy");
  });
  // The ops whose MKL kernels start-up resolves (mkl_vml_dispatch.h).
  m.def("mkl_vml_ops", [] { return mkl_vml_ops(); });
  m.def("compile_times_ms", [] {  // [(cpu_ms, wall_ms)] per compile, in order
    std::vector<std::pair<double, double>> out;
    for (const engine::CompileTime& t : engine::compile_times()) out.emplace_back(t.cpu_ms, t.wall_ms);
    return out;
  });
  m.def("metrics_report", [] {
    engine::publish_cache_counters();
    return Metrics::global().report(runtime::time_breakdown());
  });
  m.def("metrics_counters", [] {
    engine::publish_cache_counters();
    return Metrics::global().snapshot();
  });
  m.def("metrics_breakdown", &time_breakdown_dict);
  m.def("metrics_mark_main_thread", [] { Timers::global().mark_main_thread(); });
  m.def("metrics_reset", [] {
    engine::publish_cache_counters();  // so that what happened before is not counted after
    Metrics::global().reset();
    runtime::reset_time_breakdown();
  });
  m.def("metrics_at_exit", [] { return settings().metrics_at_exit; });
  m.def("knobs", [] {
    py::list rows;
    for (auto& [spec, value] : describe_knobs()) {
      rows.append(py::make_tuple(spec->name, value.value, value.source, spec->default_value, accepted_values(*spec),
                                 spec->help));
    }
    return rows;
  });
  m.def("knobs_markdown", &knobs_markdown);
  m.def("cache_dir", &engine::store_dir);  // "" when memory-only
  m.def("cache_flush", [](int timeout_ms) {
    py::gil_scoped_release released;
    return engine::flush_store(timeout_ms);
  });
  m.def("cache_entries", [] {  // [(key hex, bytes, written unix s, compile ms, problem or "")]
    py::list out;
    for (const cache::StoreListing& l : engine::stored_entries())
      out.append(py::make_tuple(l.key.hex(), l.bytes, l.written_unix_s, l.compile_ms, l.problem));
    return out;
  });
  m.def("cache_clear", [] { return engine::clear_store(); });
  m.def("cache_read_only", &engine::store_read_only);
  m.def("cache_prune", [](int timeout_ms) {  // (deleted, kept)
    py::gil_scoped_release released;
    const cache::Store::PruneResult r = engine::prune_store(timeout_ms);
    return std::make_pair(r.deleted, r.kept);
  });
  m.def("cache_export", [](const std::string& path) {  // (entries, error or "")
    py::gil_scoped_release released;
    const engine::ExportOutcome r = engine::export_store(path);
    return std::make_pair(r.entries, r.error);
  });
  m.def("cache_import", [](const std::string& path, int timeout_ms) {  // (imported, foreign, bad, error or "")
    py::gil_scoped_release released;
    const engine::ImportOutcome r = engine::import_store(path, timeout_ms);
    return std::make_tuple(r.imported, r.foreign, r.bad, r.error);
  });
  m.def("cache_runs", [] {  // [(unix s, pid, hits, misses, compiles, evicted)], oldest first
    py::list out;
    for (const cache::RunRecord& r : engine::recent_runs())
      out.append(py::make_tuple(r.unix_s, r.pid, r.hits, r.misses, r.compiles, r.evicted));
    return out;
  });
  m.def("wait_for_background_compiles", [] {
    py::gil_scoped_release released;
    engine::wait_for_background_compiles();
  });
  m.def("cache_close", [](int timeout_ms) {  // kiln/__init__.py's atexit handler; returns the last warnings
    {
      py::gil_scoped_release released;
      engine::close_store(timeout_ms);
    }
    return engine::take_warnings();
  });
}
