// kiln device runtime: the interface a real accelerator runtime could implement.
//
// A device owns a memory pool (separate from host memory, with a capacity and
// statistics) and one in-order launch queue served by its own worker thread.
// Everything that touches device memory after allocation — kernels, copies,
// deferred frees, event markers — goes through that queue, so the host never
// waits for the device except at a synchronization point.
//
// Errors raised by a launch are held by the queue and delivered at the next
// synchronization point of that device (or at the launch itself when the
// runtime is in blocking mode), naming the launch that failed. The queue keeps
// running after an error: the device stays usable.
//
// No torch and no LLVM here: see DESIGN.md's layering.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiln/metrics.h"

namespace kiln::runtime {

// The most devices a process may have (KILN_DEVICE_COUNT's upper bound):
// per-device tables above the runtime are sized by it.
constexpr int kMaxDevices = 16;

// How a host thread waits for a device. The layer above may pass one that
// lets other host threads run meanwhile (the Python layer releases the GIL:
// a launch, or dropping its arguments, may need it); it must call `wait`.
// Empty: wait in place.
using HostWait = std::function<void(const std::function<void()>& wait)>;

// ---------------------------------------------------------------- errors

// Allocation past the device's capacity. Carries the numbers a user needs.
class OutOfMemoryError : public std::runtime_error {
 public:
  OutOfMemoryError(int device, size_t requested, size_t free_bytes, size_t capacity);
  int device;
  size_t requested;
  size_t free_bytes;
  size_t capacity;
};

// A launch failed on the device. `launch_name` names the op (e.g. aten::index.Tensor).
class LaunchError : public std::runtime_error {
 public:
  LaunchError(int device, std::string launch_name, std::string message);
  int device;
  std::string launch_name;
  std::string message;
  // What the launch threw, so the layer above can raise it as the same kind
  // of error (an index error stays an index error).
  std::exception_ptr cause;
};

// ---------------------------------------------------------------- memory

struct MemoryStats {
  // Now, and the highest since the start or the last reset_peak_stats().
  int64_t allocated_bytes = 0;  // bytes handed out and not yet freed (rounded to kGranularity)
  int64_t reserved_bytes = 0;   // bytes the pool holds (allocated + cached)
  int64_t requested_bytes = 0;  // what callers asked for, of the live blocks
  int64_t live_allocations = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t peak_requested_bytes = 0;
  int64_t peak_live_allocations = 0;
  // Totals since the start or the last reset_accumulated_stats().
  int64_t allocation_count = 0;  // allocations served
  int64_t free_count = 0;
  int64_t allocated_bytes_total = 0;
  int64_t freed_bytes_total = 0;
  int64_t requested_bytes_total = 0;
  int64_t requested_freed_bytes_total = 0;
  int64_t reserved_bytes_total = 0;  // bytes taken from the host
  int64_t released_bytes_total = 0;  // bytes given back (empty_cache, or to make room)
  int64_t oom_count = 0;
  int64_t capacity_bytes = 0;
};

// A caching pool over a fixed capacity. Blocks are rounded to kGranularity; a
// request takes the smallest cached block of its rounded size or larger, up
// to twice that size; empty_cache() gives cached blocks back.
class MemoryPool {
 public:
  static constexpr size_t kGranularity = 512;
  static constexpr size_t kAlignment = 64;

  MemoryPool(int device, size_t capacity_bytes);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Throws OutOfMemoryError when `bytes` cannot fit even after emptying the cache.
  void* allocate(size_t bytes);
  void free(void* ptr);
  void empty_cache();
  bool owns(const void* ptr) const;
  MemoryStats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  size_t capacity() const { return capacity_; }

  // What the program needed: per rounded block size, in order of its first
  // allocation, the most blocks of that size it held at once.
  struct BlockCount {
    size_t bytes;
    size_t count;
  };
  std::vector<BlockCount> needed_blocks() const;

  // Reserves `blocks` before the program asks for them, writing every page
  // so that the kernel maps and zeroes them now, and caches them: a warm
  // start's first allocations then neither fault nor zero (a program's first
  // training step faults in all of its device memory). Stops when `stop` is
  // set, or before the reserve would pass half the capacity. Meant for a
  // background thread; allocate() meanwhile serves as usual. Returns the
  // bytes reserved, at most `max_bytes`.
  size_t prefill(const std::vector<BlockCount>& blocks, size_t max_bytes, const std::atomic<bool>& stop);
  // Of the bytes prefill() reserved, those an allocation took.
  struct PrefillStats {
    int64_t reserved_bytes = 0;
    int64_t used_bytes = 0;
  };
  PrefillStats prefill_stats() const;

 private:
  void release_cached_locked();
  const int device_;
  const size_t capacity_;
  mutable std::mutex mu_;
  struct Block {
    size_t size;       // the block's: the request rounded, or the larger cached block it took
    size_t rounded;    // the request rounded: what allocated_bytes counts, whichever block serves it
    size_t requested;  // what the caller asked for
  };
  std::unordered_map<void*, Block> live_;
  std::map<size_t, std::vector<void*>> cached_;  // block size -> free blocks (none empty)
  struct SizeUse {
    size_t live = 0, peak = 0, first_use = 0;
  };
  std::unordered_map<size_t, SizeUse> use_by_size_;  // block size -> blocks held now, at most
  std::unordered_map<void*, size_t> prefilled_;      // cached by prefill(), not yet taken
  PrefillStats prefill_stats_;
  MemoryStats stats_;
};

// ---------------------------------------------------------------- executables

// Arguments of one launch: device buffers, integer arguments (sizes, strides,
// offsets) and floating-point scalars. Executables read them by position.
struct LaunchArgs {
  std::vector<void*> buffers;
  std::vector<int64_t> ints;
  std::vector<double> scalars;
  // The iteration space as the executable may split it over threads:
  // `work` independent units of `unit_elements` elements each (for a fused
  // kernel, the elements of a pointwise one, or the rows of a row kernel and
  // their length). Whoever planned the launch knows them; the executable
  // need not take the ints apart to find them.
  int64_t work = 0;
  int64_t unit_elements = 1;
};

// Loaded once, launched many times. The emulated device runs native host code.
class Executable {
 public:
  virtual ~Executable() = default;
  virtual const std::string& name() const = 0;
  // What the metrics count its launches under ("fused kernel").
  virtual const char* kind() const = 0;
  virtual void run(const LaunchArgs& args) = 0;
};

// ---------------------------------------------------------------- queue

// What a task on a queue is, for the device times (DeviceTimes).
enum class TaskKind : uint8_t {
  Library,  // a host function: a library kernel or a copy
  Fused,    // a compiled executable
  Other,    // a queued free, an event marker
};

// One in-order queue with its own worker. Thread-safe: launches from several
// threads are ordered by submission. The worker times every task it runs
// (two clock reads; the totals are updated under the lock it takes after
// each task anyway).
class LaunchQueue {
 public:
  using Work = std::function<void()>;

  explicit LaunchQueue(int device, HostWait host_wait = {});
  ~LaunchQueue();
  LaunchQueue(const LaunchQueue&) = delete;
  LaunchQueue& operator=(const LaunchQueue&) = delete;

  // Enqueue `work`; returns its sequence number (1, 2, ...). `name` is what an
  // error report will call it. Exceptions thrown by `work` become LaunchErrors.
  uint64_t submit(std::string name, Work work, TaskKind kind = TaskKind::Other);

  // Wait until every launch submitted so far has run, then deliver (and clear)
  // the first error recorded since the last delivery.
  void synchronize();
  // Wait until launch `seq` has run; no error delivery.
  void wait_for(uint64_t seq);
  // Deliver (and clear) a recorded error without waiting.
  void raise_pending_error();
  // Runs `wait` through the queue's HostWait (in place when it has none).
  void wait_host(const std::function<void()>& wait) const;

  uint64_t submitted() const { return submitted_.load(std::memory_order_acquire); }
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  bool idle() const { return completed() == submitted(); }
  // Whether the calling thread is this queue's worker (whose waits on its
  // own queue would never end).
  bool on_worker() const { return std::this_thread::get_id() == worker_.get_id(); }
  bool has_pending_error() const { return has_error_.load(std::memory_order_acquire); }

  // The time the worker spent in the tasks it finished since the last reset.
  DeviceTimes times() const;
  void reset_times();

 private:
  struct Item {
    std::string name;
    Work work;
    TaskKind kind = TaskKind::Other;
  };
  void worker_loop();

  const int device_;
  const HostWait host_wait_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // worker waits for items
  std::condition_variable done_cv_;  // waiters wait for completion
  std::deque<Item> items_;
  std::atomic<uint64_t> submitted_{0};
  std::atomic<uint64_t> completed_{0};
  std::atomic<bool> has_error_{false};
  std::unique_ptr<LaunchError> first_error_;  // guarded by mu_
  DeviceTimes times_;                         // guarded by mu_
  bool stop_ = false;
  std::thread worker_;
};

// ---------------------------------------------------------------- events

using Clock = std::chrono::steady_clock;

// A marker in a device's queue. Recorded events complete when every launch
// submitted before the record has run; the time they completed is kept for
// elapsed-time queries.
class Event {
 public:
  bool recorded() const { return seq_ != 0; }
  int device() const { return device_; }
  bool query() const;        // completed (true when never recorded)
  void synchronize() const;  // wait for completion (no error delivery)
  // Milliseconds between two completed events.
  static double elapsed_ms(const Event& start, const Event& end);

 private:
  friend class Device;
  struct State {
    std::atomic<bool> done{false};
    Clock::time_point when{};
  };
  int device_ = -1;
  uint64_t seq_ = 0;
  class LaunchQueue* queue_ = nullptr;
  std::shared_ptr<State> state_;
};

// ---------------------------------------------------------------- device

// Everything the layers above do with a device goes through this interface:
// memory, launches, copies, waits and events. Launches are counted here
// (Counter::Launches, by name) and KILN_LAUNCH_BLOCKING is decided here.
class Device {
 public:
  Device(int index, size_t capacity_bytes, bool launch_blocking, HostWait host_wait = {});

  int index() const { return index_; }
  MemoryPool& memory() { return pool_; }

  void* allocate(size_t bytes);
  // Gives the block back to the pool at once, even while launches that use it
  // are pending: its next owner's launches queue behind them.
  void free(void* ptr);

  // Launch a host function (library kernel) or a loaded executable.
  // In blocking mode these wait for the launch and raise its error at once.
  uint64_t launch(std::string name, LaunchQueue::Work work);
  uint64_t launch(std::shared_ptr<Executable> exe, LaunchArgs args);

  // Copies, ordered on the queue. Host memory must stay valid until the copy
  // ran: copy_from_host snapshots the source first (or holds `keep`, which
  // owns it), copy_to_host waits.
  void copy_from_host(void* dst, const void* src, size_t bytes);
  void copy_from_host(void* dst, std::shared_ptr<const void> keep, const void* src, size_t bytes);
  void copy_to_host(void* dst, const void* src, size_t bytes);
  void copy_on_device(void* dst, const void* src, size_t bytes);

  // Waits for every launch submitted so far, then raises the first error
  // recorded since the last delivery (LaunchError).
  void synchronize() { queue_.synchronize(); }
  // Whether every launch submitted so far has run.
  bool idle() const { return queue_.idle(); }
  // Whether the calling thread is the device's worker.
  bool on_worker() const { return queue_.on_worker(); }
  uint64_t submitted() const { return queue_.submitted(); }
  // Launches submitted and not yet run (the one running included).
  uint64_t queued() const { return queue_.submitted() - queue_.completed(); }
  // Enqueue a marker for `event` (re-recording replaces the previous marker).
  void record(Event& event);
  bool launch_blocking() const { return launch_blocking_; }
  // Runs `wait` (which blocks the calling thread on something the device's
  // work may need to finish) the way the runtime's own waits run: through
  // the HostWait the device was given.
  void wait_host(const std::function<void()>& wait) const { queue_.wait_host(wait); }
  // The device time of its tasks since the last reset_times() (DeviceTimes).
  DeviceTimes times() const { return queue_.times(); }
  void reset_times() { queue_.reset_times(); }

 private:
  const int index_;
  const bool launch_blocking_;
  MemoryPool pool_;
  LaunchQueue queue_;
};

// Copy between two devices: ordered after the source's pending work, on the
// destination's queue. The caller keeps the source bytes alive until the
// destination's queue ran the copy (the source's queue does not order the
// copy: its next owner of the bytes could overwrite them first).
void copy_between_devices(Device& dst_dev, void* dst, Device& src_dev, const void* src, size_t bytes);

// ---------------------------------------------------------------- runtime

struct RuntimeOptions {
  int device_count = 2;  // 1..kMaxDevices
  size_t capacity_bytes = size_t(1) << 30;
  bool launch_blocking = false;
  HostWait host_wait;
};

// Process-wide set of devices. Created once; deliberately never destroyed, so
// tensors freed during interpreter shutdown still find their pool.
class Runtime {
 public:
  // Idempotent: first call wins. Throws std::invalid_argument for a device
  // count outside 1..kMaxDevices.
  static Runtime& init(const RuntimeOptions& options);
  static Runtime& get();  // throws if init() was not called
  static bool initialized();

  int device_count() const { return static_cast<int>(devices_.size()); }
  // Throws std::out_of_range naming the index and the valid range.
  Device& device(int index);
  void synchronize_all();
  const RuntimeOptions& options() const { return options_; }
  // Every device's times, in index order.
  std::vector<DeviceTimes> device_times() const;

 private:
  explicit Runtime(const RuntimeOptions& options);
  RuntimeOptions options_;
  std::vector<std::unique_ptr<Device>> devices_;
};

// ---------------------------------------------------------------- time breakdown

// Where the time went since the last reset_time_breakdown(): the host timers
// (kiln::Timers) and every device's task times. Without a runtime, the host
// part alone.
TimeBreakdown time_breakdown();
// Zeroes the host timers and every device's times; restarts the wall clock.
void reset_time_breakdown();

}  // namespace kiln::runtime
