// Aliasing device tensors as host (CPU) or meta tensors, and back.
//
// The emulated device's memory is addressable by the host, so a library
// kernel is the CPU kernel run on CPU tensors that alias device memory. One
// alias storage stands for each device storage, so tensors sharing device
// memory share their alias storage too and CPU kernels see the same overlap
// (in-place on views, out= aliasing an input) they would see on CPU.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <unordered_map>
#include <vector>

namespace kiln::dispatch {

class AliasSet {
 public:
  // key: DispatchKey::CPU (aliases over device memory) or DispatchKey::Meta
  // (no data: shape inference). `resizable_cpu` lets CPU kernels resize an
  // alias (they then get fresh host memory, which the caller copies back).
  explicit AliasSet(c10::DispatchKey key, bool resizable_cpu = false) : key_(key), resizable_cpu_(resizable_cpu) {}
  // CPU tensors over zero-filled host memory instead of the device's (same
  // sizes, strides, offsets and storage sharing): what a CPU kernel needs
  // to check its arguments without their data (argument_check.h).
  static AliasSet zeroed_twins() {
    AliasSet set(c10::DispatchKey::CPU, /*resizable_cpu=*/true);
    set.zeroed_ = true;
    return set;
  }

  at::Tensor alias(const at::Tensor& device_tensor);
  // The device tensor viewing the same bytes as `alias_result` (a tensor
  // whose storage is one of this set's alias storages), or an undefined
  // tensor when it is not on one of them.
  at::Tensor device_view(const at::Tensor& alias_result) const;
  // Whether `t`'s storage still points at the device bytes it aliased.
  bool still_aliases(const at::Tensor& t) const;

 private:
  struct Entry {
    c10::Storage device_storage;
    c10::Storage alias_storage;
    void* device_data;
  };
  at::Tensor alias_of(const at::Tensor& device_tensor);

  c10::DispatchKey key_;
  bool resizable_cpu_;
  bool zeroed_ = false;
  std::vector<Entry> entries_;  // few per op: linear search beats hashing
  // The aliases handed out, by the device tensor they stand for. Holding
  // the impl pointer is safe: the caller holds the device tensors.
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> aliased_;
};

// Applies `fn` to every tensor in an IValue (a tensor, a tensor list or a list
// of optional tensors), returning the IValue with the results in their place.
c10::IValue map_tensors(const c10::IValue& value, const std::function<at::Tensor(const at::Tensor&)>& fn);
// Visits every defined tensor of an IValue.
void for_each_tensor(const c10::IValue& value, const std::function<void(const at::Tensor&)>& fn);

// A TensorImpl over `storage` with `like`'s sizes, strides, offset, dtype and conj/neg bits.
at::Tensor tensor_on_storage(const c10::Storage& storage, c10::DispatchKey key, const at::Tensor& like);

}  // namespace kiln::dispatch
