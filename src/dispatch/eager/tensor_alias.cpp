#include "dispatch/eager/tensor_alias.h"

#include <ATen/core/List.h>

#include <algorithm>
#include <cstdlib>

namespace kiln::dispatch {

at::Tensor tensor_on_storage(const c10::Storage& storage, c10::DispatchKey key, const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(storage), c10::DispatchKeySet(key), like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) impl->_set_conj(true);
  if (like.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

at::Tensor AliasSet::alias(const at::Tensor& t) {
  // One tensor passed twice (torch.maximum(a, b, out=a)) is one alias:
  // kernels tell an in-place write from an out= write by identity.
  for (const auto& [impl, alias] : aliased_) {
    if (impl == t.unsafeGetTensorImpl()) return alias;
  }
  at::Tensor alias = alias_of(t);
  aliased_.emplace_back(t.unsafeGetTensorImpl(), alias);
  return alias;
}

at::Tensor AliasSet::alias_of(const at::Tensor& t) {
  const c10::Storage& storage = t.storage();
  for (const Entry& e : entries_) {
    if (e.device_storage.is_alias_of(storage)) return tensor_on_storage(e.alias_storage, key_, t);
  }
  const size_t nbytes = storage.nbytes();
  c10::Storage alias_storage;
  if (zeroed_) {
    // calloc: a large block comes from fresh zero pages, touched only where the kernel reads.
    void* data = std::calloc(std::max<size_t>(nbytes, 1), 1);
    TORCH_CHECK_WITH(OutOfMemoryError, data != nullptr, "kiln: out of host memory for the ", nbytes,
                     "-byte zero-filled twin of an argument (eager's argument checks of a traced op)");
    alias_storage =
        c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                     c10::DataPtr(data, data, &std::free, c10::Device(c10::kCPU)), c10::GetAllocator(c10::kCPU), true);
  } else if (key_ == c10::DispatchKey::Meta) {
    alias_storage = c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                                 c10::DataPtr(nullptr, c10::Device(c10::kMeta)), c10::GetAllocator(c10::kMeta), true);
  } else {
    void* data = const_cast<void*>(storage.data());
    alias_storage = c10::Storage(c10::Storage::use_byte_size_t(), nbytes, c10::DataPtr(data, c10::Device(c10::kCPU)),
                                 resizable_cpu_ ? c10::GetAllocator(c10::kCPU) : nullptr, resizable_cpu_);
  }
  entries_.push_back(Entry{storage, alias_storage, const_cast<void*>(storage.data())});
  return tensor_on_storage(alias_storage, key_, t);
}

at::Tensor AliasSet::device_view(const at::Tensor& r) const {
  if (!r.defined() || !r.has_storage()) return {};
  for (const Entry& e : entries_) {
    if (e.alias_storage.is_alias_of(r.storage())) {
      return tensor_on_storage(e.device_storage, c10::DispatchKey::PrivateUse1, r);
    }
  }
  return {};
}

bool AliasSet::still_aliases(const at::Tensor& t) const {
  for (const Entry& e : entries_) {
    if (e.alias_storage.is_alias_of(t.storage())) return e.alias_storage.data() == e.device_data;
  }
  return false;
}

namespace {
bool is_optional_tensor_list(const c10::IValue& v) {
  if (!v.isList()) return false;
  auto type = v.toList().elementType();
  auto opt = type->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == c10::TypeKind::TensorType;
}
}  // namespace

c10::IValue map_tensors(const c10::IValue& v, const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    return t.defined() ? c10::IValue(fn(t)) : v;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(t.defined() ? fn(t) : t);
    return out;
  }
  if (is_optional_tensor_list(v)) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor() && e.toTensor().defined()) out.push_back(fn(e.toTensor()));
      else out.push_back(std::nullopt);
    }
    return out;
  }
  return v;
}

void for_each_tensor(const c10::IValue& v, const std::function<void(const at::Tensor&)>& fn) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) fn(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList())
      if (t.defined()) fn(t);
  } else if (is_optional_tensor_list(v)) {
    for (const c10::IValue& e : v.toListRef())
      if (e.isTensor() && e.toTensor().defined()) fn(e.toTensor());
  }
}

}  // namespace kiln::dispatch
