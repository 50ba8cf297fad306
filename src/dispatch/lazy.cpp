// Per-device recorders and the flush (see lazy.h).
#include "dispatch/lazy.h"

#include <array>
#include <atomic>
#include <mutex>

#include "dispatch/lowering.h"
#include "dispatch/neuron.h"
#include "kiln/engine.h"

namespace kiln::dispatch {
namespace {

constexpr int kMaxDevices = 16;  // KILN_DEVICE_COUNT's upper bound

struct DeviceRecorder {
  trace::Recorder recorder;
  // Frees that arrived while another thread held the recorder (a queue
  // worker dropping a library kernel's arguments while the Python thread
  // records). Their memory stays allocated until the recorder has seen them,
  // so the pool cannot hand the address to a new output first.
  std::mutex deferred_mu;
  std::vector<void*> deferred;
  // Whether `deferred` may be non-empty: read on every recorded op and free,
  // so that the common case takes no second lock.
  std::atomic<bool> has_deferred{false};
};
std::array<DeviceRecorder, kMaxDevices> g_recorders;

// With the recorder locked: tells it about deferred frees; returns their pointers to free.
std::vector<void*> drain_deferred(DeviceRecorder& r) {
  std::vector<void*> ptrs;
  if (!r.has_deferred.load(std::memory_order_acquire)) return ptrs;
  {
    std::lock_guard<std::mutex> g(r.deferred_mu);
    ptrs.swap(r.deferred);
    r.has_deferred.store(false, std::memory_order_relaxed);
  }
  for (void* p : ptrs) r.recorder.on_free(p);
  return ptrs;
}

void release(int device, const std::vector<void*>& ptrs) {
  for (void* p : ptrs) runtime::Runtime::get().device(device).free(p);
}

}  // namespace

void configure_lazy_mode() {
  const Settings& s = settings();
  engine::Options o;
  o.fusion.max_ops = s.fusion_max_ops;
  o.fusion.stream_min_bytes = s.stream_min_mb << 20;
  o.codegen.fast_math = s.fast_math;
  o.num_threads = s.num_threads;
  o.dump_dir = s.dump_dir;
  o.log_enabled = [](const char* channel) { return settings().log_enabled(channel); };
  o.log = [](const char* channel, const std::string& message) { log(channel, message); };
  engine::configure(o);
}

void flush_trace(runtime::Device& dev, std::string_view reason) {
  if (!settings().lazy) return;
  DeviceRecorder& r = g_recorders[dev.index()];
  std::vector<void*> freed;
  std::string failure;
  {
    auto lock = r.recorder.lock();
    freed = drain_deferred(r);
    if (r.recorder.size() != 0) {
      try {
        engine::flush(dev, r.recorder.take(), reason);
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
  }
  release(dev.index(), freed);
  TORCH_CHECK(failure.empty(), "kiln: running the ops recorded on ", device_string(dev.index()), " since the last ",
              "sync failed: ", failure, ". This is a kiln bug; KILN_MODE=eager runs every op on its own.");
  if (dev.launch_blocking() && !dev.queue().idle()) wait_for_launches(dev, "launch blocking");
}

bool try_record(const OpInfo& info, const torch::jit::Stack& stack, size_t first, c10::DeviceIndex index,
                c10::ArrayRef<c10::IValue> outputs, c10::ArrayRef<bool> fresh) {
  if (!settings().lazy || info.lowering == nullptr) return false;
  LowerCtx ctx(info.name.c_str(), stack, first, outputs, fresh);
  try {
    info.lowering(ctx);
    ctx.decline_overlaps();
  } catch (const Decline&) {
    return false;
  } catch (const c10::Error&) {
    return false;  // an argument the lowering did not expect: eager's kernel decides
  }
  DeviceRecorder& r = g_recorders[index];
  std::vector<void*> freed;
  bool full;
  {
    auto lock = r.recorder.lock();
    freed = drain_deferred(r);
    ctx.commit(r.recorder);
    full = static_cast<int64_t>(r.recorder.size()) >= settings().trace_max_ops;
  }
  release(index, freed);
  if (full) flush_trace(device(index), "trace size limit");
  return true;
}

void free_device_memory(int device, void* ptr) {
  if (settings().lazy) {
    DeviceRecorder& r = g_recorders[device];
    auto lock = r.recorder.try_lock();
    if (!lock.owns_lock()) {
      std::lock_guard<std::mutex> g(r.deferred_mu);
      r.deferred.push_back(ptr);
      r.has_deferred.store(true, std::memory_order_release);
      return;
    }
    std::vector<void*> freed = drain_deferred(r);
    r.recorder.on_free(ptr);
    lock.unlock();
    release(device, freed);
  }
  runtime::Runtime::get().device(device).free(ptr);
}

}  // namespace kiln::dispatch
