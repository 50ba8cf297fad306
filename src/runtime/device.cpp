// A device: memory pool + launch queue, and the copies and events built on them.
#include <cstring>
#include <sstream>

#include "kiln/metrics.h"
#include "kiln/runtime.h"

namespace kiln::runtime {

Device::Device(int index, size_t capacity_bytes, bool launch_blocking, HostWait host_wait)
    : index_(index),
      launch_blocking_(launch_blocking),
      pool_(index, capacity_bytes),
      queue_(index, std::move(host_wait)) {}

void* Device::allocate(size_t bytes) {
  try {
    return pool_.allocate(bytes);
  } catch (const OutOfMemoryError&) {
    // Pending launches hold memory their arguments keep alive (a library
    // kernel's captured tensors): it comes back as they finish.
    if (queue_.idle()) throw;
    queue_.wait_for(queue_.submitted());
    return pool_.allocate(bytes);
  }
}

void Device::free(void* ptr) {
  // Back to the pool at once, also while launches that use the block are
  // pending: the queue runs in order, so every launch that uses the block's
  // next owner runs after them (CUDA's caching allocator reuses a block on its
  // stream the same way). Deferring the free behind the queue instead made a
  // host running ahead allocate fresh pages for every output in flight.
  pool_.free(ptr);
}

uint64_t Device::launch(std::string name, LaunchQueue::Work work) {
  Metrics::global().add(Counter::Launches, name);
  uint64_t seq = queue_.submit(std::move(name), std::move(work), TaskKind::Library);
  if (launch_blocking_) queue_.synchronize();
  return seq;
}

uint64_t Device::launch(std::shared_ptr<Executable> exe, LaunchArgs args) {
  Metrics::global().add(Counter::Launches, exe->kind());
  std::string name = exe->name();
  uint64_t seq = queue_.submit(
      std::move(name), [exe = std::move(exe), args = std::move(args)] { exe->run(args); }, TaskKind::Fused);
  if (launch_blocking_) queue_.synchronize();
  return seq;
}

void Device::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  // Snapshot the host bytes so the caller may reuse its buffer at once, as a
  // blocking host-to-device copy allows.
  auto staging = std::shared_ptr<unsigned char[]>(new unsigned char[bytes]);
  std::memcpy(staging.get(), src, bytes);
  launch("copy host->device", [dst, staging, bytes] { std::memcpy(dst, staging.get(), bytes); });
}

void Device::copy_from_host(void* dst, std::shared_ptr<const void> keep, const void* src, size_t bytes) {
  if (bytes == 0) return;
  launch("copy host->device", [dst, keep = std::move(keep), src, bytes] { std::memcpy(dst, src, bytes); });
}

void Device::copy_to_host(void* dst, const void* src, size_t bytes) {
  queue_.synchronize();
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void Device::copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  launch("copy device->device", [dst, src, bytes] { std::memmove(dst, src, bytes); });
}

void Device::record(Event& event) {
  auto state = std::make_shared<Event::State>();
  event.device_ = index_;
  event.queue_ = &queue_;
  event.state_ = state;
  event.seq_ = queue_.submit("event", [state] {
    state->when = Clock::now();
    state->done.store(true, std::memory_order_release);
  });
}

bool Event::query() const { return !state_ || state_->done.load(std::memory_order_acquire); }

void Event::synchronize() const {
  if (queue_ != nullptr) queue_->wait_for(seq_);
}

double Event::elapsed_ms(const Event& start, const Event& end) {
  if (!start.recorded() || !end.recorded()) {
    throw std::invalid_argument("elapsed time needs two recorded events");
  }
  if (!start.query() || !end.query()) {
    throw std::invalid_argument("elapsed time needs both events to have completed; synchronize first");
  }
  return std::chrono::duration<double, std::milli>(end.state_->when - start.state_->when).count();
}

void copy_between_devices(Device& dst_dev, void* dst, Device& src_dev, const void* src, size_t bytes) {
  if (&dst_dev == &src_dev) {
    dst_dev.copy_on_device(dst, src, bytes);
    return;
  }
  // The source's pending writes must land first; the destination's queue
  // orders the copy against its own launches.
  src_dev.synchronize();
  dst_dev.copy_on_device(dst, src, bytes);
}

Runtime::Runtime(const RuntimeOptions& options) : options_(options) {
  for (int i = 0; i < options.device_count; ++i) {
    devices_.push_back(std::make_unique<Device>(i, options.capacity_bytes, options.launch_blocking, options.host_wait));
  }
}

namespace {
std::atomic<Runtime*> g_runtime{nullptr};
std::mutex g_init_mu;
}  // namespace

Runtime& Runtime::init(const RuntimeOptions& options) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  Runtime* rt = g_runtime.load();
  if (rt == nullptr) {
    if (options.device_count < 1 || options.device_count > kMaxDevices) {
      throw std::invalid_argument("kiln runtime: " + std::to_string(options.device_count) + " devices requested; 1.." +
                                  std::to_string(kMaxDevices) + " are supported");
    }
    rt = new Runtime(options);  // leaked on purpose: see the header
    g_runtime.store(rt);
  }
  return *rt;
}

Runtime& Runtime::get() {
  Runtime* rt = g_runtime.load(std::memory_order_acquire);
  if (rt == nullptr) throw std::logic_error("kiln runtime used before Runtime::init()");
  return *rt;
}

bool Runtime::initialized() { return g_runtime.load() != nullptr; }

Device& Runtime::device(int index) {
  if (index < 0 || index >= device_count()) {
    std::ostringstream os;
    os << "device index " << index << " is out of range: " << device_count()
       << " device(s) exist, valid indices are 0.." << device_count() - 1 << " (KILN_DEVICE_COUNT sets how many)";
    throw std::out_of_range(os.str());
  }
  return *devices_[index];
}

void Runtime::synchronize_all() {
  for (auto& d : devices_) d->synchronize();
}

std::vector<DeviceTimes> Runtime::device_times() const {
  std::vector<DeviceTimes> out;
  for (const auto& d : devices_) out.push_back(d->times());
  return out;
}

TimeBreakdown time_breakdown() {
  return Timers::global().breakdown(Runtime::initialized() ? Runtime::get().device_times()
                                                           : std::vector<DeviceTimes>{});
}

void reset_time_breakdown() {
  Timers::global().reset();
  if (!Runtime::initialized()) return;
  Runtime& rt = Runtime::get();
  for (int i = 0; i < rt.device_count(); ++i) rt.device(i).reset_times();
}

}  // namespace kiln::runtime
