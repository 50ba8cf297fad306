// The recording side of a device: the trace pending since its last flush,
// which buffers it touches, and the frees that race it.
//
// Thread-safe: autograd records from its own thread, and a queue worker
// frees a library kernel's arguments while the program records. The lock is
// a plain mutex, and nothing runs under it that frees device memory on the
// same thread: a flush hands the trace it took to its caller's `launch` with
// the lock held (launches are submitted in program order) and destroys it,
// with the buffers it kept alive, only after letting go.
// No torch: the dispatch layer lowers ATen calls into TraceOps.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kiln/runtime.h"
#include "kiln/trace.h"

namespace kiln::trace {

// Whether traceable ops are recorded (KILN_MODE=lazy) or launched one by one.
// Set at start-up and by a mode switch, read by every thread that dispatches.
bool lazy_mode();
void set_lazy_mode(bool lazy);

// The trace a recorder has pending, as a lowering appends to it (only
// inside Recorder::record, which holds the lock).
class PendingTrace {
 public:
  // The trace's id for the allocation at `base` (registered on first use).
  // `keepalive` is held for buffers that are not fresh.
  int32_t buffer(void* base, size_t nbytes, bool fresh, const std::shared_ptr<void>& keepalive);
  // Whether `base` is a buffer of the pending trace.
  bool touches(const void* base) const { return live_.count(base) != 0; }
  void append(TraceOp&& op) { trace_.ops.push_back(std::move(op)); }
  size_t size() const { return trace_.ops.size(); }
  const TraceOp& last() const { return trace_.ops.back(); }
  // The adaptive policy's decision for the pending trace, made as its first
  // op is recorded (Trace::start_key, Trace::ran_as_library,
  // Trace::hold_until_ops).
  void start(uint64_t key, bool ran_as_library, bool counts_only, int hold_until_ops) {
    trace_.start_key = key;
    trace_.ran_as_library = ran_as_library;
    trace_.counts_only = counts_only;
    trace_.hold_until_ops = hold_until_ops;
  }
  bool ran_as_library() const { return trace_.ran_as_library; }
  // What a trace the device queue's low watermark cut
  // (KILN_QUEUE_LOW_WATERMARK) left for the trace that continues it: its
  // start key and tier, its chain key, and the ops recorded since the trace
  // that began the chain.
  struct Continuation {
    uint64_t start_key;
    bool counts_only;
    uint64_t chain_key;
    size_t ops;
  };
  // The continuation the pending trace starts from (its first op was just
  // recorded), if the trace before it was cut; it starts so, fused.
  std::optional<Continuation> take_continuation() {
    std::optional<Continuation> c = continuation_;
    continuation_.reset();
    if (c) {
      trace_.chain_key = c->chain_key;
      ops_before_ = c->ops;
    }
    return c;
  }
  // Ops recorded since the last flush that was not a cut: what
  // KILN_TRACE_MAX_OPS counts, wherever the queue cut the trace.
  size_t ops_in_chain() const { return ops_before_ + trace_.ops.size(); }
  // Whether the trace holds its ops' library launches, and until how many
  // ops (Trace::hold_until_ops).
  bool holds_launches() const { return trace_.hold_until_ops > 0; }
  int hold_until_ops() const { return trace_.hold_until_ops; }
  void hold(HeldLaunch&& launch) { trace_.held_launches.push_back(std::move(launch)); }
  // The trace has hold_until_ops ops: it runs fused. Returns the launches it
  // held, for the caller to drop after the recorder's lock (their arguments
  // may be the last owners of device memory).
  std::vector<HeldLaunch> run_fused() {
    trace_.hold_until_ops = 0;
    std::vector<HeldLaunch> held = std::move(trace_.held_launches);
    trace_.held_launches.clear();
    return held;
  }

 private:
  friend class Recorder;
  // A fresh buffer of the trace becomes dead; the address may be handed out
  // again, except memory pending ops still read (a buffer with memory_of):
  // the trace frees that through `free_later` after the flush, and this
  // returns true.
  bool on_free(void* base, const std::function<void(void*)>& free_later);
  // The pending trace, for a flush; `cut`: the queue's low watermark cut it
  // and the next trace continues it. `chain`: compute Trace::chain_key.
  Trace take(bool cut, bool chain);
  // A flush found nothing pending: a trace cut before it ended there.
  void end_chain() { continuation_.reset(); }

  Trace trace_;
  std::unordered_map<const void*, int32_t> live_;  // base -> buffer id
  // Buffers the trace keeps alive, by size: the candidates for adoption.
  std::unordered_map<size_t, std::vector<int32_t>> held_by_size_;
  // Memory handed out by adopt_held_block, by base, to the buffer it came
  // from, until the output it backs is registered (buffer()).
  std::unordered_map<const void*, int32_t> adopted_;
  std::optional<Continuation> continuation_;
  size_t ops_before_ = 0;  // of the chain the pending trace continues
};

class Recorder {
 public:
  explicit Recorder(runtime::Device& device) : device_(device) {}
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Runs `append(PendingTrace&)` with the recorder held; returns how many
  // ops are pending after it (since the last flush, a cut one included).
  // `append` must not free device memory.
  template <class Append>
  size_t record(Append&& append) {
    auto lock = hold();
    drain_deferred_frees();
    append(pending_);
    return pending_.size();
  }

  // Takes the pending trace (none pending: returns) and passes it to
  // `launch(const Trace&)` with the recorder held. The trace is destroyed
  // after the lock is released, also when `launch` throws: its keepalives
  // may run storage deleters that free into this recorder.
  // `cut` and `chain` as PendingTrace::take's.
  template <class Launch>
  void flush(Launch&& launch, bool cut = false, bool chain = false) {
    Trace taken;  // outlives the lock
    auto lock = hold();
    drain_deferred_frees();
    if (pending_.size() == 0) {
      pending_.end_chain();
      return;
    }
    taken = pending_.take(cut, chain);
    launch(static_cast<const Trace&>(taken));
  }

  // The device allocator's free: a fresh buffer of the pending trace freed
  // before the flush becomes dead (its stores are dropped), then the memory
  // goes back to the device. When another thread holds the recorder the
  // free waits in a list, and the memory stays allocated until the
  // recorder has seen it: the pool must not hand the address to a new
  // output of the trace first.
  void free(void* ptr);

  // Ops pending (and, as every taking of the lock, drains deferred frees).
  size_t pending();

  // Whether ops are pending that wait for a fused launch (a trace not of
  // the library tier).
  bool pending_for_fusing();

  // The memory of a buffer of `nbytes` that the pending trace alone keeps
  // alive, for an output of an op recorded (or launched) after the ops that
  // read it, or null. `take(keepalive)` belongs to the layer that made the
  // keepalive: it returns the memory, which it takes from the keepalive,
  // when nothing else holds it, else null. Registered, the output is a
  // fresh buffer whose memory_of names the old one: fusion puts its writes
  // after the old one's reads (rule 6). This is the memory eager mode would
  // have reused here: its owner freed it before this op.
  void* adopt_held_block(size_t nbytes, const std::function<void*(const std::shared_ptr<void>&)>& take);

 private:
  // Takes the lock; while another thread holds it, waits the way the
  // device's waits do (the Python layer lets go of the GIL: the holder may
  // be waiting for the device, or for the GIL itself, under the lock).
  std::unique_lock<std::mutex> hold() {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) device_.wait_host([&] { lock.lock(); });
    return lock;
  }
  // With mu_ held: tells the pending trace about deferred frees, then gives their memory back.
  void drain_deferred_frees();
  // How memory an output took from the trace goes back once the flushed trace lets go.
  std::function<void(void*)> free_later();

  runtime::Device& device_;
  std::mutex mu_;
  PendingTrace pending_;
  std::mutex deferred_mu_;
  std::vector<void*> deferred_;
  // Whether `deferred_` may be non-empty: read on every record and free, so
  // that the common case takes no second lock.
  std::atomic<bool> has_deferred_{false};
};

// The recorder of the runtime's device `index` (0 <= index < kMaxDevices),
// made on first use; never destroyed (frees arrive during shutdown).
Recorder& recorder(int index);

}  // namespace kiln::trace
