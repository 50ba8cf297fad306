// LowerCtx: arguments -> trace values, outputs -> stores (see lower_context.h).
#include "dispatch/lazy/lower_context.h"

#include <ATen/native/TypeProperties.h>

#include <algorithm>
#include <cstring>

#include "dispatch/backend/device_allocator.h"

namespace kiln::dispatch {

std::optional<ir::DType> ir_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBool: return ir::DType::Bool;
    case at::kByte: return ir::DType::UInt8;
    case at::kChar: return ir::DType::Int8;
    case at::kShort: return ir::DType::Int16;
    case at::kInt: return ir::DType::Int32;
    case at::kLong: return ir::DType::Int64;
    case at::kHalf: return ir::DType::Float16;
    case at::kBFloat16: return ir::DType::BFloat16;
    case at::kFloat: return ir::DType::Float32;
    case at::kDouble: return ir::DType::Float64;
    default: return std::nullopt;
  }
}

ir::DType LowerCtx::dtype(at::ScalarType t) {
  auto d = ir_dtype(t);
  if (!d) throw Decline{};
  return *d;
}

ir::DType LowerCtx::opmath(at::ScalarType t) { return ir::compute_dtype(dtype(t)); }

LowerCtx::LowerCtx(const char* name, const torch::jit::Stack& stack, size_t first, c10::ArrayRef<c10::IValue> outputs,
                   c10::ArrayRef<bool> fresh)
    : name_(name), stack_(stack), first_(first), outputs_(outputs), fresh_outputs_(fresh) {
  op_.name = name;
}

std::string LowerCtx::overload() const {
  const char* dot = std::strchr(name_, '.');
  return dot ? std::string(dot + 1) : std::string();
}

const at::Tensor& LowerCtx::tensor(size_t i) const {
  if (!arg(i).isTensor()) throw Decline{};
  const at::Tensor& t = arg(i).toTensor();
  if (!t.defined() || !t.is_privateuseone()) throw Decline{};
  return t;
}

const at::Tensor& LowerCtx::out(size_t j) const {
  if (j >= outputs_.size() || !outputs_[j].isTensor()) throw Decline{};
  const at::Tensor& t = outputs_[j].toTensor();
  if (!t.defined() || !t.is_privateuseone()) throw Decline{};
  return t;
}

double LowerCtx::scalar_value(size_t i) const {
  const c10::IValue& v = arg(i);
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.is_cpu() || t.dim() != 0) throw Decline{};
    return t.item<double>();
  }
  if (!v.isScalar()) throw Decline{};
  return v.toScalar().toDouble();
}

at::ScalarType LowerCtx::common_dtype(std::initializer_list<size_t> args) const {
  at::native::ResultTypeState state{};
  for (size_t i : args) {
    if (!present(i)) continue;
    const c10::IValue& v = arg(i);
    if (v.isTensor()) state = at::native::update_result_type_state(v.toTensor(), state);
    else if (v.isScalar()) state = at::native::update_result_type_state(v.toScalar(), state);
    else throw Decline{};
  }
  return at::native::result_type(state);
}

void LowerCtx::pointwise_space() {
  const at::Tensor& o = out(0);
  op_.sizes.assign(o.sizes().begin(), o.sizes().end());
  if (op_.sizes.empty()) op_.sizes = {1};
}

void LowerCtx::reduction_space(size_t i, std::vector<int64_t> dims) {
  const at::Tensor& t = tensor(i);
  op_.sizes.assign(t.sizes().begin(), t.sizes().end());
  const int64_t rank = t.dim();
  if (op_.sizes.empty()) op_.sizes = {1};
  if (dims.empty()) {
    for (size_t d = 0; d < op_.sizes.size(); ++d) dims.push_back(static_cast<int64_t>(d));
  }
  op_.reduced = 0;
  for (int64_t d : dims) {
    const int64_t w = rank == 0 ? 0 : c10::maybe_wrap_dim(d, rank);
    op_.reduced |= uint64_t(1) << w;
  }
}

int64_t LowerCtx::reduced_count() const {
  int64_t n = 1;
  for (size_t d = 0; d < op_.sizes.size(); ++d) {
    if ((op_.reduced >> d) & 1) n *= op_.sizes[d];
  }
  return n;
}

trace::View LowerCtx::view_of(const at::Tensor& t, bool output) {
  if (t.is_conj() || t.is_neg() || t.layout() != at::kStrided) throw Decline{};
  trace::View v;
  v.dtype = dtype(t.scalar_type());
  v.offset = t.storage_offset();
  const size_t R = op_.sizes.size();
  v.strides.assign(R, 0);
  const int64_t r = t.dim();
  if (op_.reduced != 0 && output) {
    // A reduction's output: keepdim (same rank) or the kept dims in order.
    std::vector<size_t> kept;
    for (size_t d = 0; d < R; ++d) {
      if (!((op_.reduced >> d) & 1)) kept.push_back(d);
    }
    if (static_cast<size_t>(r) == R && !(R == 1 && r == 0)) {
      for (size_t d = 0; d < R; ++d) v.strides[d] = t.size(d) == 1 ? 0 : t.stride(d);
    } else if (static_cast<size_t>(r) == kept.size()) {
      for (size_t k = 0; k < kept.size(); ++k) v.strides[kept[k]] = t.size(k) == 1 ? 0 : t.stride(k);
    } else {
      throw Decline{};
    }
  } else {
    // Right-aligned broadcasting into the space.
    if (static_cast<size_t>(r) > R && !(r == 0)) throw Decline{};
    for (int64_t i = 0; i < r; ++i) {
      const size_t d = R - r + i;
      if (t.size(i) == 1) continue;
      if (t.size(i) != op_.sizes[d]) throw Decline{};
      v.strides[d] = t.stride(i);
    }
  }
  for (size_t d = 0; d < R; ++d) {
    if (op_.sizes[d] == 1) v.strides[d] = 0;
  }
  // Remember the tensor; commit() turns the index into a buffer id.
  tensors_.push_back(t);
  tensor_fresh_.push_back(false);
  v.buffer = static_cast<int32_t>(tensors_.size()) - 1;
  return v;
}

int32_t LowerCtx::value(size_t i, ir::DType as) {
  const c10::IValue& v = arg(i);
  if (v.isTensor() && v.toTensor().is_privateuseone()) {
    return op_.cast(op_.load(view_of(v.toTensor(), false)), as);
  }
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.is_cpu() || t.dim() != 0) throw Decline{};
    if (at::isFloatingType(t.scalar_type())) return op_.cast(op_.scalar_float(t.item<double>()), as);
    if (t.scalar_type() == at::kBool) return op_.cast(op_.scalar_int(t.item<bool>(), ir::DType::Bool), as);
    if (!at::isIntegralType(t.scalar_type(), false)) throw Decline{};
    return op_.cast(op_.scalar_int(t.item<int64_t>()), as);
  }
  if (v.isDouble()) return op_.cast(op_.scalar_float(v.toDouble()), as);
  if (v.isBool()) return op_.cast(op_.scalar_int(v.toBool(), ir::DType::Bool), as);
  if (v.isInt()) return op_.cast(op_.scalar_int(v.toInt()), as);
  throw Decline{};
}

// Eager casts every operand to the common dtype before computing in its
// opmath type. For a tensor that took part in the promotion that cast is
// exact (or none); Python numbers and 0-dim tensors (device ones too) of a
// wider dtype round: bf16_tensor + float32_0dim adds bf16(value).
int32_t LowerCtx::operand(size_t i, at::ScalarType common) {
  const ir::DType compute = opmath(common);
  const ir::DType storage = dtype(common);
  if (!ir::is_reduced_float(storage)) return value(i, compute);  // the cast to compute is that rounding
  return op_.cast(value(i, storage), compute);
}

void LowerCtx::store(size_t j, int32_t node) {
  trace::View v = view_of(out(j), true);
  tensor_fresh_.back() = j < fresh_outputs_.size() && fresh_outputs_[j];
  op_.store(std::move(v), node);
}

namespace {

// Elements from the first to the last one `t` addresses, in elements.
int64_t extent(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return 0;
    last += (t.size(d) - 1) * std::abs(t.stride(d));
  }
  return last + 1;
}

// Whether no two elements of `t` share memory, proven from its strides: in
// increasing order of stride, each stride clears everything the smaller
// dims span (a sufficient condition, exact for the usual slices and
// transposes that at::has_internal_overlap calls too hard).
bool provably_no_internal_overlap(const at::Tensor& t) {
  c10::SmallVector<std::pair<int64_t, int64_t>, 6> dims;  // (|stride|, size)
  // An empty tensor counts too: a traced write through an empty expanded
  // view would still store at one address along the expanded dim, which a
  // row kernel reducing over that dim cannot hold (invalid kernel IR).
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(std::abs(t.stride(d)), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 0;  // elements the dims so far reach past the first
  for (auto [stride, size] : dims) {
    if (stride <= span) return false;
    span += stride * (size - 1);
  }
  return true;
}

enum class Overlap { None, Same, Other };

Overlap overlap_between(const at::Tensor& a, const at::Tensor& b) {
  if (a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl()) return Overlap::Same;
  if (!a.storage().is_alias_of(b.storage()) || a.numel() == 0 || b.numel() == 0) return Overlap::None;
  if (a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
      a.dtype() == b.dtype()) {
    return Overlap::Same;
  }
  auto lowest = [](const at::Tensor& t) {
    int64_t low = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) low += std::min<int64_t>(0, (t.size(d) - 1) * t.stride(d));
    return low * static_cast<int64_t>(t.element_size());
  };
  const int64_t a_begin = lowest(a), b_begin = lowest(b);
  const int64_t a_end = a_begin + extent(a) * static_cast<int64_t>(a.element_size());
  const int64_t b_end = b_begin + extent(b) * static_cast<int64_t>(b.element_size());
  return a_end <= b_begin || b_end <= a_begin ? Overlap::None : Overlap::Other;
}

}  // namespace

void LowerCtx::decline_overlaps() const {
  for (size_t j = 0; j < outputs_.size(); ++j) {
    if (j < fresh_outputs_.size() && fresh_outputs_[j]) continue;  // nothing else can point into it
    if (!outputs_[j].isTensor() || !outputs_[j].toTensor().defined()) continue;
    const at::Tensor& written = outputs_[j].toTensor();
    if (!provably_no_internal_overlap(written)) throw Decline{};
    for (size_t k = 0; k < tensors_.size(); ++k) {
      if (tensor_fresh_[k]) continue;
      if (overlap_between(written, tensors_[k]) == Overlap::Other) throw Decline{};
    }
  }
}

// Whether this op writes every byte of the storage at `base` and reads none:
// a store covers it whole (a dense view at offset 0 over all its bytes; a
// store writes every element of its view) and no load reads it. What the
// buffer held before does not matter to the trace then.
bool LowerCtx::overwrites_whole(const void* base) const {
  bool whole = false;
  for (const auto& o : op_.stores) {
    const at::Tensor& t = tensors_[o.view.buffer];
    if (t.storage().data() != base) continue;
    whole = whole || (t.storage_offset() == 0 && t.is_non_overlapping_and_dense() &&
                      t.numel() * static_cast<int64_t>(t.element_size()) == static_cast<int64_t>(t.storage().nbytes()));
  }
  for (const auto& v : op_.loads) {
    if (tensors_[v.buffer].storage().data() == base) return false;
  }
  return whole;
}

void LowerCtx::commit(trace::PendingTrace& rec) {
  c10::SmallVector<int32_t, 4> ids(tensors_.size());
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const c10::Storage& s = tensors_[k].storage();
    void* base = s.mutable_data();
    // A buffer the trace writes whole before it reads it (zeros(), then a
    // gradient copied into a slice) counts as the trace's own, as an
    // output allocated for it does: not held until the flush, and if freed
    // before it, its stores are dropped. Holding it would change what the
    // program does: autograd sums a gradient into a buffer in place only
    // when nothing else holds its storage, and out of place allocates.
    const bool touched = rec.touches(base);
    const bool own = tensor_fresh_[k] || (!touched && allocated_by_device_pool(s) && overwrites_whole(base));
    std::shared_ptr<void> keepalive;  // the trace holds buffers it did not allocate until the flush
    if (!own && !touched) keepalive = std::make_shared<c10::Storage>(s);
    ids[k] = rec.buffer(base, s.nbytes(), own, keepalive);
  }
  for (auto& v : op_.loads) v.buffer = ids[v.buffer];
  for (auto& o : op_.stores) o.view.buffer = ids[o.view.buffer];
  rec.append(std::move(op_));
}

}  // namespace kiln::dispatch
