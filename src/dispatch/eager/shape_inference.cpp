#include "dispatch/eager/shape_inference.h"

#include <cstring>
#include <limits>

#include "dispatch/eager/cpp_meta.h"
#include "dispatch/eager/tensor_alias.h"
#include "kiln/hash_mix.h"

namespace kiln::dispatch {

void Geometry::restore(const at::Tensor& written) const {
  if (matches(written)) return;
  at::Tensor values = written.clone();
  written.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  written.copy_(values);
}

std::shared_ptr<const InferredShapes> ShapeCache::find(c10::ArrayRef<int64_t> key, uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto [begin, end] = index_.equal_range(hash);
  for (auto it = begin; it != end; ++it) {
    if (c10::ArrayRef<int64_t>(it->second->key) == key) {
      order_.splice(order_.begin(), order_, it->second);
      return it->second->value;
    }
  }
  return nullptr;
}

void ShapeCache::insert(std::vector<int64_t> key, uint64_t hash, std::shared_ptr<const InferredShapes> value) {
  std::lock_guard<std::mutex> lock(mu_);
  order_.push_front(Entry{std::move(key), hash, std::move(value)});
  index_.emplace(hash, order_.begin());
  if (order_.size() <= kMaxEntries) return;
  const Order::iterator oldest = std::prev(order_.end());
  auto [begin, end] = index_.equal_range(oldest->hash);
  for (auto it = begin; it != end; ++it) {
    if (it->second == oldest) {
      index_.erase(it);
      break;
    }
  }
  order_.pop_back();
}

namespace {

enum Tag : int64_t {
  kTensor = 1,
  kUndefined,
  kInt,
  kDouble,
  kBool,
  kNone,
  kString,
  kIntList,
  kDoubleList,
  kBoolList,
  kTensorList,
  kDevice,
  kGenerator,
  kComplex,
  kSymInt,
  kAlias
};

// Tensor sizes, strides and offsets, and integer arguments, as a key holds
// them: as they are, or, for an argument pattern, by class (0, 1 and
// negative values as themselves, any other value by the order of its first
// appearance in the call).
class Extents {
 public:
  explicit Extents(bool by_class) : by_class_(by_class) {}
  int64_t operator()(int64_t v) {
    if (!by_class_ || v <= 1) return v;
    // Class ids from INT64_MIN up: no literal is that negative.
    for (size_t i = 0; i < seen_.size(); ++i)
      if (seen_[i] == v) return kFirstClass + static_cast<int64_t>(i);
    seen_.push_back(v);
    return kFirstClass + static_cast<int64_t>(seen_.size() - 1);
  }

 private:
  static constexpr int64_t kFirstClass = std::numeric_limits<int64_t>::min();
  bool by_class_;
  c10::SmallVector<int64_t, 16> seen_;
};

void add_tensor(ShapeKey& key, Extents& extent, const at::Tensor& t, bool written = false) {
  if (!t.defined()) {
    key.push_back(kUndefined);
    return;
  }
  key.push_back(kTensor);
  key.push_back(static_cast<int64_t>(t.scalar_type()) | (int64_t(t.device().type()) << 8) |
                (int64_t(t.is_conj()) << 16) | (int64_t(t.is_neg()) << 17));
  key.push_back(t.dim());
  for (int64_t s : t.sizes()) key.push_back(extent(s));
  for (int64_t s : t.strides()) key.push_back(extent(s));
  // A tensor the op writes keeps its offset (squeeze_, resize_ out=): the
  // geometry recorded for it is absolute, so its offset is part of the key.
  if (written) key.push_back(extent(t.storage_offset()));
}

int64_t bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// Appends what the meta kernel can see of `v`: its structure to `key`, the
// bits of floating-point values to `floats`. False when `v` is of a kind
// this key does not describe (the call is then not cached).
bool add_value(ShapeKey& key, ShapeKey& floats, Extents& extent, const c10::IValue& v, bool written) {
  if (v.isTensor()) {
    add_tensor(key, extent, v.toTensor(), written);
  } else if (v.isInt()) {
    key.insert(key.end(), {kInt, extent(v.toInt())});
  } else if (v.isDouble()) {
    key.push_back(kDouble);
    floats.push_back(bits(v.toDouble()));
  } else if (v.isBool()) {
    key.insert(key.end(), {kBool, v.toBool()});
  } else if (v.isNone()) {
    key.push_back(kNone);
  } else if (v.isString()) {
    key.insert(key.end(), {kString, static_cast<int64_t>(std::hash<std::string_view>{}(v.toStringView()))});
  } else if (v.isIntList()) {
    key.push_back(kIntList);
    key.push_back(static_cast<int64_t>(v.toIntList().size()));
    for (int64_t x : v.toIntList()) key.push_back(extent(x));
  } else if (v.isDoubleList()) {
    key.push_back(kDoubleList);
    key.push_back(static_cast<int64_t>(v.toDoubleList().size()));
    for (double x : v.toDoubleList()) floats.push_back(bits(x));
  } else if (v.isBoolList()) {
    key.push_back(kBoolList);
    for (bool x : v.toBoolList()) key.push_back(x);
    key.push_back(-1);
  } else if (v.isTensorList() || v.isList()) {
    key.push_back(kTensorList);
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) add_tensor(key, extent, e.toTensor());
      else if (e.isNone()) key.push_back(kNone);
      else return false;
    }
    key.push_back(-1);
  } else if (v.isDevice()) {
    key.insert(key.end(), {kDevice, int64_t(v.toDevice().type()) * 1000 + v.toDevice().index()});
  } else if (v.isGenerator()) {
    key.push_back(kGenerator);
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    key.push_back(kComplex);
    floats.insert(floats.end(), {bits(c.real()), bits(c.imag())});
  } else if (v.isSymInt()) {
    auto s = v.toSymInt().maybe_as_int();
    if (!s) return false;
    key.insert(key.end(), {kSymInt, extent(*s)});
  } else {
    return false;
  }
  return true;
}

class DiscardWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

constexpr uint64_t kHashSeed = 1469598103934665603ull;

uint64_t hash_key(c10::ArrayRef<int64_t> key, uint64_t h = kHashSeed) {
  for (int64_t k : key) h = mix_in(h, static_cast<uint64_t>(k));
  return h;
}

// Which top-level tensor arguments share storage, and where they start:
// eager's kernels refuse some overlaps (x.add_(x.t())), so a call whose
// arguments overlap differently is another case to check.
void add_storage_sharing(ShapeKey& key, Extents& extent, const torch::jit::Stack& stack, size_t first) {
  for (size_t i = first; i < stack.size(); ++i) {
    if (!stack[i].isTensor() || !stack[i].toTensor().defined()) continue;
    const at::Tensor& a = stack[i].toTensor();
    for (size_t j = first; j < i; ++j) {
      if (!stack[j].isTensor() || !stack[j].toTensor().defined()) continue;
      const at::Tensor& b = stack[j].toTensor();
      if (a.storage().is_alias_of(b.storage())) {
        key.insert(key.end(), {kAlias, static_cast<int64_t>(i - first), static_cast<int64_t>(j - first),
                               extent(a.storage_offset()), extent(b.storage_offset())});
        break;
      }
    }
  }
}

std::shared_ptr<InferredShapes> run_meta(const c10::OperatorHandle& op, const std::vector<bool>& mutable_arg,
                                         const torch::jit::Stack& stack, size_t first) {
  AliasSet metas(c10::DispatchKey::Meta);
  std::vector<c10::IValue> meta_args;
  meta_args.reserve(stack.size() - first);
  for (size_t i = first; i < stack.size(); ++i) {
    c10::IValue mapped = map_tensors(
        stack[i], [&](const at::Tensor& t) { return t.device().type() == c10::kPrivateUse1 ? metas.alias(t) : t; });
    if (mapped.isDevice() && mapped.toDevice().type() == c10::kPrivateUse1) mapped = c10::Device(c10::kMeta);
    meta_args.push_back(std::move(mapped));
  }
  torch::jit::Stack meta_stack = meta_args;
  {
    // Its warnings are not eager's (a Python meta kernel warns that it
    // resizes an in-place op's self); the CPU kernel gives eager's.
    DiscardWarnings discard;
    c10::WarningUtils::WarningHandlerGuard guard(&discard);
    const c10::DispatchKeySet meta(c10::DispatchKey::Meta);
    if (const c10::KernelFunction* kernel = cpp_meta_kernel(op.operator_name())) {
      kernel->callBoxed(op, meta, &meta_stack);
    } else {
      op.redispatchBoxed(meta, &meta_stack);
    }
  }
  auto result = std::make_shared<InferredShapes>();
  result->returns = std::move(meta_stack);
  result->written.resize(meta_args.size());
  for (size_t i = 0; i < meta_args.size(); ++i) {
    if (mutable_arg[i] && meta_args[i].isTensor() && meta_args[i].toTensor().defined()) {
      result->written[i] = Geometry::of(meta_args[i].toTensor());
    }
  }
  return result;
}

}  // namespace

std::shared_ptr<const InferredShapes> infer_shapes(const c10::OperatorHandle& op, const std::vector<bool>& mutable_arg,
                                                   const torch::jit::Stack& stack, size_t first, ShapeCache& cache) {
  ShapeKey key, floats;
  Extents exact(/*by_class=*/false);
  bool cacheable = true;
  for (size_t i = first; i < stack.size() && cacheable; ++i) {
    cacheable = add_value(key, floats, exact, stack[i], mutable_arg[i - first]);
  }
  if (!cacheable) return run_meta(op, mutable_arg, stack, first);
  add_storage_sharing(key, exact, stack, first);
  // The key: the structure, then the floating-point values; the argument
  // shapes are the structure alone.
  const uint64_t shapes_hash = hash_key(key);
  const uint64_t hash = hash_key(floats, shapes_hash);
  key.append(floats.begin(), floats.end());
  if (auto hit = cache.find(key, hash)) return hit;
  auto result = run_meta(op, mutable_arg, stack, first);
  result->argument_shapes = shapes_hash;
  // The pattern: built again, by class, once per new case only.
  ShapeKey pattern, ignored;
  Extents by_class(/*by_class=*/true);
  for (size_t i = first; i < stack.size(); ++i) add_value(pattern, ignored, by_class, stack[i], mutable_arg[i - first]);
  add_storage_sharing(pattern, by_class, stack, first);
  result->argument_pattern = hash_key(pattern);
  cache.insert(std::vector<int64_t>(key.begin(), key.end()), hash, result);
  return result;
}

}  // namespace kiln::dispatch
