// Output geometry of an op before it runs: its meta kernel, memoized.
//
// Launching asynchronously needs the outputs' sizes, strides and dtypes up
// front. Meta kernels give them, but many are Python functions (torch's
// _meta_registrations shadow the C++ ones) costing tens of microseconds.
// Their answer is a pure function of the arguments' metadata and non-tensor
// values, so it is cached per op under exactly that key.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace kiln::dispatch {

// Sizes, strides and offset of a tensor.
struct Geometry {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;

  static Geometry of(const at::Tensor& t) { return {t.sizes().vec(), t.strides().vec(), t.storage_offset()}; }
  bool matches(const at::Tensor& t) const {
    return t.sizes() == c10::IntArrayRef(sizes) && t.strides() == c10::IntArrayRef(strides) &&
           t.storage_offset() == offset;
  }
  // Gives `written` this geometry, moving its values to the new layout (an
  // out= kernel may restride its output, e.g. to channels-last).
  void restore(const at::Tensor& written) const;
};

struct InferredShapes {
  std::vector<c10::IValue> returns;              // meta tensors (or lists) per return
  std::vector<std::optional<Geometry>> written;  // per argument: geometry after the op, if it writes it
  // What the key says of the arguments but their floating-point values:
  // their dtypes, sizes, strides, flags and integer values, and which share
  // storage (0: not cacheable). With the scalars that do not fit, the unit
  // of the first-call check (argument_case, OpInfo).
  uint64_t argument_shapes = 0;
  // The same with each tensor size, stride and offset replaced by its class:
  // 0 and 1 as themselves, any other value by the order of its first
  // appearance in the call, so equal values share a class. What first-sight
  // checks are keyed by (argument_check.h): a new length of a sequence is
  // not a new case, a size that becomes 1 (broadcast) or equal to another
  // is. Set with argument_shapes.
  uint64_t argument_pattern = 0;
  // The op info's verdict for these arguments, once known (0 = not yet):
  // the cache key determines it, so a cache hit skips recomputing it.
  mutable std::atomic<int> verdict{0};
  // For an op whose output geometry comes from its CPU kernel
  // (OpInfo::geometry_from_cpu): what the first call returned, as meta
  // tensors; null until then. Only for cacheable keys (argument_shapes != 0).
  mutable std::atomic<std::shared_ptr<const std::vector<c10::IValue>>> cpu_returns;
};

// What the meta kernel sees of a call, built on the stack for every call.
using ShapeKey = c10::SmallVector<int64_t, 64>;

// Per op, the argument cases seen most recently. Bounded, least recently
// used first out: an entry (its key and meta tensors) takes about 1 KB, and
// a process that kept every case of ever new programs grew by 9 KB a program
// over 5,000 of them (bench/soak.py) with the 4,096 per op it used to keep.
// A training loop's cases per op are far fewer than the capacity.
class ShapeCache {
 public:
  static constexpr size_t kMaxEntries = 512;
  std::shared_ptr<const InferredShapes> find(c10::ArrayRef<int64_t> key, uint64_t hash) const;
  void insert(std::vector<int64_t> key, uint64_t hash, std::shared_ptr<const InferredShapes> value);

 private:
  struct Entry {
    std::vector<int64_t> key;
    uint64_t hash;
    std::shared_ptr<const InferredShapes> value;
  };
  using Order = std::list<Entry>;  // most recently used first
  mutable std::mutex mu_;
  mutable Order order_;
  std::unordered_multimap<uint64_t, Order::iterator> index_;
};

// Runs (or recalls) the op's meta kernel on meta twins of the arguments
// stack[first..]. Throws what the meta kernel throws (data-dependent output,
// bad arguments).
std::shared_ptr<const InferredShapes> infer_shapes(const c10::OperatorHandle& op, const std::vector<bool>& mutable_arg,
                                                   const torch::jit::Stack& stack, size_t first, ShapeCache& cache);

}  // namespace kiln::dispatch
