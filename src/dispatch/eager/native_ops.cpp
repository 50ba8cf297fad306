// Ops the device implements itself rather than through the library kernel:
// allocation, the view primitives (which must alias device storage), resize,
// set_, reading a scalar back to the host, and whether a CPU tensor's
// data may be swapped for a device tensor's.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/startup.h"
#include "dispatch/backend/sync.h"
#include "dispatch/backend/torch_errors.h"
#include "dispatch/eager/device_tensors.h"
#include "dispatch/eager/tensor_alias.h"
#include "kiln/metrics.h"

namespace kiln::dispatch {

at::Tensor empty_device(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        c10::DeviceIndex index) {
  c10::DeviceGuard guard(c10::Device(c10::kPrivateUse1, index));
  return at::detail::empty_strided_generic(sizes, strides, c10::GetAllocator(c10::kPrivateUse1),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

at::Tensor host_alias(const at::Tensor& t) {
  AliasSet one(c10::DispatchKey::CPU);
  return one.alias(t);
}

void resize_device_storage(const c10::Storage& storage, size_t nbytes) {
  auto* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  const auto index = impl->device().index();
  // An empty storage has no bytes any launch could use: no need to wait.
  if (impl->nbytes() != 0) synchronize(device(index), "storage resize");
  c10::DeviceGuard guard(impl->device());
  c10::DataPtr fresh = impl->allocator()->allocate(nbytes);
  const size_t keep = std::min(nbytes, impl->nbytes());
  // The old block goes back to the pool when `fresh` replaces it; its next
  // owner's launches queue behind this copy.
  if (keep > 0) with_torch_errors([&] { device(index).copy_on_device(fresh.get(), impl->data(), keep); });
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(nbytes);
}

namespace {

void check_factory_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, settings().device_name,
              " supports only strided tensors, got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only CPU tensors can be pinned; ", settings().device_name,
              " tensors live in device memory");
}

c10::DeviceIndex factory_index(std::optional<c10::Device> device_opt) {
  c10::Device d = c10::device_or_default(device_opt);
  c10::DeviceIndex index = d.has_index() ? d.index() : current_device();
  device(index);  // raises for an index out of range
  return index;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device_opt,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  const TimeScope timing(TimeCategory::HostRecord);  // host_record_s (kiln.metrics.breakdown)
  check_factory_options(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(c10::kPrivateUse1, factory_index(device_opt)));
  return at::detail::empty_generic(size, c10::GetAllocator(c10::kPrivateUse1),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device_opt,
                         std::optional<bool> pin_memory) {
  const TimeScope timing(TimeCategory::HostRecord);
  check_factory_options(layout, pin_memory);
  return empty_device(size, stride, c10::dtype_or_default(dtype), factory_index(device_opt));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size_sym,
                          std::optional<c10::MemoryFormat> memory_format) {
  const TimeScope timing(TimeCategory::HostRecord);
  auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  const size_t needed =
      (self.numel() == 0 ? 0 : static_cast<size_t>(self.storage_offset() + self.numel())) * self.element_size();
  if (needed > self.storage().nbytes()) resize_device_storage(self.storage(), needed);
  return self;
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) { return at::native::set_(self, source); }

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::cpu::set_(self, source, offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                       C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(c10::kPrivateUse1), true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  const TimeScope timing(TimeCategory::HostRecord);
  runtime::Device& dev = device(self.device().index());
  synchronize(dev, "item");
  Metrics::global().add(Counter::BytesCopied, "device_to_host", self.element_size());
  at::Tensor value = at::empty({}, self.options().device(c10::kCPU));
  with_torch_errors([&] { dev.copy_to_host(value.data_ptr(), self.const_data_ptr(), self.element_size()); });
  if (self.is_conj()) value._set_conj(true);
  if (self.is_neg()) value._set_neg(true);
  return at::native::_local_scalar_dense_cpu(value);
}

// Whether `from`'s TensorImpl may take `self`'s place (Module.to swaps
// `param.data` instead of building a new Parameter; `x.data = y`). Dense CPU
// and device tensors may, as CPU and CUDA tensors may: without it `.to()`
// unties shared parameters (tied embeddings).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense_here = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.is_privateuseone());
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense_here(self) && dense_here(from));
}

void record_stream(at::Tensor&, c10::Stream) {
  // One queue per device and deferred frees: nothing to record (see the allocator).
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize_);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_", set_empty);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("record_stream", record_stream);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace kiln::dispatch
