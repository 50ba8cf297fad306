#include "dispatch/eager/small_stand_in.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "dispatch/eager/tensor_alias.h"

namespace kiln::dispatch {
namespace {

// An int or a SymInt, or a list or optional of them. By their real type: a
// dtype, layout or memory format is an int to TorchScript but names no size.
bool holds_ints(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return true;
    case c10::TypeKind::ListType:
    case c10::TypeKind::OptionalType: return holds_ints(type->containedType(0));
    default: return false;
  }
}

bool is_device_tensor(const at::Tensor& t) { return t.defined() && t.device().type() == c10::kPrivateUse1; }

}  // namespace

std::optional<torch::jit::Stack> small_stand_in(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                                size_t first) {
  const std::vector<c10::Argument>& schema = op.schema().arguments();
  if (stack.size() - first != schema.size()) return std::nullopt;
  for (size_t i = 0; i < schema.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    const bool no_int = v.isNone() || (v.isIntList() && v.toIntList().empty());  // a full reduction's dim
    if (holds_ints(schema[i].real_type()) && !no_int) return std::nullopt;
  }
  // The device tensors, by storage: each storage's tensors share one shape.
  struct Shared {
    const c10::StorageImpl* storage;
    std::vector<int64_t> sizes;
    caffe2::TypeMeta dtype;
  };
  std::vector<Shared> storages;
  std::vector<int64_t> sizes;
  int64_t largest = 0;
  bool plain = true;
  for (size_t i = first; i < stack.size() && plain; ++i) {
    for_each_tensor(stack[i], [&](const at::Tensor& t) {
      if (!plain || !is_device_tensor(t)) return;
      plain = t.is_contiguous() && t.storage_offset() == 0 && !t.is_conj() && !t.is_neg();
      const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
      auto same = std::find_if(storages.begin(), storages.end(), [&](const Shared& e) { return e.storage == s; });
      if (same == storages.end()) storages.push_back({s, t.sizes().vec(), t.dtype()});
      else plain = plain && c10::IntArrayRef(same->sizes) == t.sizes() && same->dtype == t.dtype();
      largest = std::max(largest, t.numel());
      for (int64_t n : t.sizes()) sizes.push_back(n);
    });
  }
  if (!plain || largest < kStandInMinElements) return std::nullopt;

  // Each distinct size of 2 or more, in order, to 2, 3, 4, ...
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  auto small = [&](int64_t n) {
    if (n <= 1) return n;
    return 2 + static_cast<int64_t>(std::lower_bound(sizes.begin(), sizes.end(), n) -
                                    std::upper_bound(sizes.begin(), sizes.end(), int64_t{1}));
  };
  // One small storage per storage, one small tensor per tensor: kernels
  // tell an in-place write from an out= write by identity.
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> made;
  auto stand_in = [&](const at::Tensor& t) -> at::Tensor {
    if (!is_device_tensor(t)) return t;
    const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    for (const auto& [impl, tensor] : made) {
      if (impl == t.unsafeGetTensorImpl()) return tensor;
    }
    for (const auto& [impl, tensor] : made) {
      if (impl->storage().unsafeGetStorageImpl() == s) {
        at::Tensor view = at::alias(tensor);
        made.emplace_back(t.unsafeGetTensorImpl(), view);
        return view;
      }
    }
    std::vector<int64_t> shape;
    for (int64_t n : t.sizes()) shape.push_back(small(n));
    at::Tensor tensor = at::empty(shape, t.options());
    made.emplace_back(t.unsafeGetTensorImpl(), tensor);
    return tensor;
  };
  torch::jit::Stack out(stack.begin(), stack.begin() + static_cast<std::ptrdiff_t>(first));
  for (size_t i = first; i < stack.size(); ++i) out.push_back(map_tensors(stack[i], stand_in));
  return out;
}

}  // namespace kiln::dispatch
