// The op-lowering table: which ATen ops are traced in lazy mode, and the
// Kernel IR each becomes. One row per op family; the functional, in-place
// (add_) and out= (add.out) overloads share a row, since their arguments sit
// at the same positions and the written tensor is the op's output.
//
// Each lowering computes what eager's CPU kernel computes: in the op's
// common dtype (TensorIterator's promotion), in float32 for float16 and
// bfloat16 (opmath) and rounded once to the output dtype, with the same
// operation order (no contraction unless eager's vectorized kernel fuses:
// add/sub with alpha and lerp use an FMA, as at::vec does).
#include "dispatch/lazy/lowering.h"

#include <ATen/ExpandUtils.h>
#include <c10/core/DefaultDtype.h>

#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

namespace kiln::dispatch {
namespace {

using ir::DType;
using ir::Op;
using Lower = void (*)(LowerCtx&);

// ------------------------------------------------------------ helpers

DType compute_of(LowerCtx& c, std::initializer_list<size_t> args) { return LowerCtx::opmath(c.common_dtype(args)); }

// Ops computing in their common dtype: operands rounded to it (see LowerCtx::operand).
struct Common {
  at::ScalarType dtype;
  DType compute;
  Common(LowerCtx& c, std::initializer_list<size_t> args)
      : dtype(c.common_dtype(args)), compute(LowerCtx::opmath(dtype)) {}
};

// float16/bfloat16 results of these ops are left to the library kernel: for
// them eager's scalar loop (small tensors, and the tail of every tensor)
// rounds differently from its vectorized loop (rsqrt rounds the sqrt first,
// pow goes through double, softmax and friends accumulate in their own
// order), so no single fused formula reproduces eager, and one bfloat16 ulp
// is beyond the OpInfo comparison tolerance.
void exact_only_in_full_floats(LowerCtx& c) {
  for (size_t j = 0; j < c.num_outputs(); ++j) {
    const at::ScalarType t = c.out(j).scalar_type();
    if (t == at::kHalf || t == at::kBFloat16) throw Decline{};
  }
  for (size_t i = 0; i < c.num_args(); ++i) {
    if (!c.arg(i).isTensor()) continue;
    const at::ScalarType t = c.arg(i).toTensor().scalar_type();
    if (t == at::kHalf || t == at::kBFloat16) throw Decline{};
  }
}

// Ops that promote integer inputs to the default float dtype (div, exp, ...).
DType float_compute_of(LowerCtx& c, std::initializer_list<size_t> args) {
  at::ScalarType t = c.common_dtype(args);
  if (!at::isFloatingType(t)) t = c10::typeMetaToScalarType(c10::get_default_dtype());
  return LowerCtx::opmath(t);
}

void unary(LowerCtx& c, Op op, bool to_float) {
  if (op == Op::Rsqrt || op == Op::Erf) exact_only_in_full_floats(c);
  c.pointwise_space();
  DType t = to_float ? float_compute_of(c, {0}) : compute_of(c, {0});
  if (!ir::is_floating(t) && op != Op::Neg && op != Op::Abs && op != Op::Sign && op != Op::Floor && op != Op::Ceil &&
      op != Op::Round && op != Op::Trunc) {
    throw Decline{};
  }
  c.store(0, c.n(op, t, c.value(0, t)));
}

// mul and div keep a second operand of one element (a Python number, a
// 0-dim or size-1 tensor: eager's is_scalar(2) fast path, which reads its
// original value in opmath) in opmath precision; everything else, add and
// sub included, and a second operand of more elements, rounds to the common
// dtype (measured against torch 2.13's CPU kernels).
bool scalar_second_in_opmath(LowerCtx& c, Op op) {
  if (op != Op::Mul && op != Op::Div) return false;
  return !c.arg(1).isTensor() || c.arg(1).toTensor().numel() == 1;
}

void binary(LowerCtx& c, Op op, bool to_float) {
  c.pointwise_space();
  Common k(c, {0, 1});
  if (to_float && !at::isFloatingType(k.dtype)) k.dtype = c10::typeMetaToScalarType(c10::get_default_dtype());
  const DType t = LowerCtx::opmath(k.dtype);
  int32_t b = scalar_second_in_opmath(c, op) ? c.value(1, t) : c.operand(1, k.dtype);
  c.store(0, c.n(op, t, c.operand(0, k.dtype), b));
}

void compare(LowerCtx& c, Op op) {
  c.pointwise_space();
  Common k(c, {0, 1});
  c.store(0, c.n(op, DType::Bool, c.operand(0, k.dtype), c.operand(1, k.dtype)));
}

// Eager compares its operands, cast to their common dtype, with zero: a
// 0-dim float64 1e-50 beside a bfloat16 tensor rounds to 0 and is false.
void logical(LowerCtx& c, Op op) {
  c.pointwise_space();
  Common k(c, {0, 1});
  auto truth = [&](size_t i) { return c.op().cast(c.operand(i, k.dtype), DType::Bool); };
  c.store(0, c.n(op, DType::Bool, truth(0), truth(1)));
}

void bitwise(LowerCtx& c, Op op) {
  c.pointwise_space();
  DType t = compute_of(c, {0, 1});
  if (ir::is_floating(t)) throw Decline{};
  c.store(0, c.n(op, t, c.value(0, t), c.value(1, t)));
}

bool alpha_is_one(LowerCtx& c, size_t i) { return !c.present(i) || c.scalar_value(i) == 1.0; }

// self + alpha * other (sub: alpha negated). at::vec computes fmadd(other, alpha, self).
void add_sub(LowerCtx& c, bool subtract) {
  c.pointwise_space();
  Common k(c, {0, 1});
  const DType t = k.compute;
  int32_t a = c.operand(0, k.dtype), b = c.operand(1, k.dtype);
  if (alpha_is_one(c, 2)) {
    c.store(0, c.n(subtract ? Op::Sub : Op::Add, t, a, b));
    return;
  }
  if (t == DType::Bool) throw Decline{};
  // float16/bfloat16 with alpha: eager's vector loop rounds alpha and fuses
  // the multiply-add, its scalar loop rounds alpha * other first.
  if (ir::is_reduced_float(LowerCtx::dtype(k.dtype))) throw Decline{};
  int32_t alpha = c.value(2, t);
  if (subtract) alpha = c.n(Op::Neg, t, alpha);
  c.store(0, ir::is_floating(t) ? c.n(Op::Fma, t, b, alpha, a) : c.n(Op::Add, t, a, c.n(Op::Mul, t, alpha, b)));
}

void div(LowerCtx& c) {
  if (c.present(2)) throw Decline{};  // rounding_mode: library kernel
  binary(c, Op::Div, true);
}

// pow(Tensor, Scalar): eager special-cases these exponents.
void pow(LowerCtx& c) {
  exact_only_in_full_floats(c);
  c.pointwise_space();
  const bool scalar_base = !c.arg(0).isTensor() || !c.arg(0).toTensor().is_privateuseone();
  const bool scalar_exp = !c.arg(1).isTensor() || !c.arg(1).toTensor().is_privateuseone();
  DType t = compute_of(c, {0, 1});
  if (!ir::is_floating(t)) throw Decline{};
  if (scalar_exp && !scalar_base) {
    const double e = c.scalar_value(1);
    int32_t x = c.value(0, t);
    int32_t out;
    if (e == 0) out = c.c(1, t);
    else if (e == 1) out = x;
    else if (e == 2) out = c.n(Op::Mul, t, x, x);
    else if (e == 3) out = c.n(Op::Mul, t, c.n(Op::Mul, t, x, x), x);
    else if (e == 0.5) out = c.n(Op::Sqrt, t, x);
    else if (e == -0.5) out = c.n(Op::Rsqrt, t, x);
    else if (e == -1) out = c.n(Op::Reciprocal, t, x);
    else if (e == -2) out = c.n(Op::Reciprocal, t, c.n(Op::Mul, t, x, x));
    else out = c.n(Op::Pow, t, x, c.value(1, t));
    c.store(0, out);
    return;
  }
  c.store(0, c.n(Op::Pow, t, c.value(0, t), c.value(1, t)));
}

void where(LowerCtx& c) {
  c.pointwise_space();
  Common k(c, {1, 2});
  c.store(0, c.n(Op::Where, k.compute, c.value(0, DType::Bool), c.operand(1, k.dtype), c.operand(2, k.dtype)));
}

// clamp(self, min, max): NaN in self propagates; min > max gives max.
// Eager's clamp with a NaN scalar bound fills its result with NaN (the
// TORCH_IMPL_FUNCs of clamp, clamp_min and clamp_max), whatever the input.
bool nan_scalar_bound(LowerCtx& c, std::initializer_list<int> bounds) {
  for (int i : bounds) {
    if (c.present(i) && c.arg(i).isDouble() && std::isnan(c.arg(i).toDouble())) return true;
  }
  return false;
}

void clamp(LowerCtx& c, bool has_min, bool has_max) {
  c.pointwise_space();
  Common k(c, {0, 1, 2});
  const DType t = k.compute;
  if (nan_scalar_bound(c, {1, 2})) {
    c.store(0, c.c(std::numeric_limits<double>::quiet_NaN(), k.compute));
    return;
  }
  int32_t x = c.operand(0, k.dtype);  // scalar bounds: Scalar::to<scalar_t>(), rounded to the dtype
  const bool tensor_bounds = (c.present(1) && c.arg(1).isTensor()) || (c.present(2) && c.arg(2).isTensor());
  if (has_min && c.present(1)) x = c.n(tensor_bounds ? Op::MaxEitherNaN : Op::MaxFirstNaN, t, x, c.operand(1, k.dtype));
  if (has_max && c.present(2)) x = c.n(tensor_bounds ? Op::MinEitherNaN : Op::MinFirstNaN, t, x, c.operand(2, k.dtype));
  c.store(0, x);
}

void clamp_one(LowerCtx& c, bool is_min) {
  c.pointwise_space();
  Common k(c, {0, 1});
  if (nan_scalar_bound(c, {1})) {
    c.store(0, c.c(std::numeric_limits<double>::quiet_NaN(), k.compute));
    return;
  }
  const bool tensor_bound = c.arg(1).isTensor() && c.arg(1).toTensor().is_privateuseone();
  Op op = is_min ? (tensor_bound ? Op::MaxEitherNaN : Op::MaxFirstNaN)
                 : (tensor_bound ? Op::MinEitherNaN : Op::MinFirstNaN);
  c.store(0, c.n(op, k.compute, c.operand(0, k.dtype), c.operand(1, k.dtype)));
}

// lerp: small weights from the start, large ones from the end (at::vec's fmadd forms).
void lerp(LowerCtx& c) {
  c.pointwise_space();
  DType t = compute_of(c, {0, 1});
  if (!ir::is_floating(t)) throw Decline{};
  int32_t a = c.value(0, t), b = c.value(1, t), w = c.value(2, t);
  int32_t d = c.n(Op::Sub, t, b, a);
  int32_t small = c.n(Op::Lt, DType::Bool, c.n(Op::Abs, t, w), c.c(0.5, t));
  int32_t from_start = c.n(Op::Fma, t, w, d, a);
  int32_t from_end = c.n(Op::Fma, t, c.n(Op::Neg, t, d), c.n(Op::Sub, t, c.c(1, t), w), b);
  c.store(0, c.n(Op::Where, t, small, from_start, from_end));
}

// addcmul: self + value * t1 * t2; addcdiv: self + value * t1 / t2.
void addc(LowerCtx& c, Op op) {
  if (op == Op::Div) exact_only_in_full_floats(c);
  c.pointwise_space();
  Common k(c, {0, 1, 2});
  const DType t = k.compute;
  if (op == Op::Div && !ir::is_floating(t)) throw Decline{};
  // The tensors are cast to the common dtype first (int64 operands of a
  // half result become inf beyond 65504); `value` is a scalar parameter.
  int32_t t1 = c.operand(1, k.dtype);
  int32_t scaled = c.present(3) ? c.n(Op::Mul, t, c.value(3, t), t1) : t1;
  int32_t self = c.operand(0, k.dtype), t2 = c.operand(2, k.dtype);
  // Eager's self + value * t1 * t2 is compiled with contraction into
  // fma(value * t1, t2, self): no rounding (or overflow) of the last product.
  if (op == Op::Mul && ir::is_floating(t)) {
    c.store(0, c.n(Op::Fma, t, scaled, t2, self));
    return;
  }
  c.store(0, c.n(Op::Add, t, self, c.n(op, t, scaled, t2)));
}

void fill(LowerCtx& c) {
  c.pointwise_space();
  DType t = LowerCtx::dtype(c.out(0).scalar_type());
  c.store(0, c.value(1, t));
}

void zero(LowerCtx& c) {
  c.pointwise_space();
  c.store(0, c.c(0, LowerCtx::dtype(c.out(0).scalar_type())));
}

void copy_cast(LowerCtx& c) {
  c.pointwise_space();
  const at::Tensor& src = c.tensor(0);
  if (c.out(0).device() != src.device()) throw Decline{};
  c.store(0, c.value(0, LowerCtx::dtype(src.scalar_type())));
}

// copy_(self, src) within one device (copy.cpp records it): src broadcast
// into self's shape and converted to its dtype, as eager's copy converts.
// Copies eager refuses (src does not broadcast to self; overlaps, which
// every traced op declines) are not traced.
void copy_in_place(LowerCtx& c) {
  const at::Tensor& self = c.out(0);
  const at::Tensor& src = c.tensor(1);
  if (self.device() != src.device() || !at::is_expandable_to(src.sizes(), self.sizes())) throw Decline{};
  c.pointwise_space();
  c.store(0, c.value(1, LowerCtx::dtype(src.scalar_type())));
}

// isposinf / isneginf: x == +inf / -inf; never for integers and bool.
void equals_infinity(LowerCtx& c, double sign) {
  c.pointwise_space();
  DType t = compute_of(c, {0});
  if (!ir::is_floating(t)) {
    c.store(0, c.c(0, DType::Bool));
    return;
  }
  c.store(0, c.n(Op::Eq, DType::Bool, c.value(0, t), c.c(sign * std::numeric_limits<double>::infinity(), t)));
}

// ---- activations (eager's CPU formulas)

void relu(LowerCtx& c) {
  c.pointwise_space();
  DType t = compute_of(c, {0});
  c.store(0, c.n(Op::MaxFirstNaN, t, c.value(0, t), c.c(0, t)));
}

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kGeluBeta = 1.41421356237309504880 * 1.12837916709551257390 * 0.5;  // sqrt(2) * 2/sqrt(pi) / 2
constexpr double kGeluKappa = 0.044715;

bool tanh_approximation(LowerCtx& c, size_t i) {
  if (!c.present(i)) return false;
  const std::string a = c.arg(i).toStringRef();
  if (a == "tanh") return true;
  if (a == "none") return false;
  throw Decline{};
}

void gelu(LowerCtx& c) {
  c.pointwise_space();
  DType t = float_compute_of(c, {0});
  int32_t x = c.value(0, t);
  int32_t half_x = c.n(Op::Mul, t, x, c.c(0.5, t));
  if (tanh_approximation(c, 1)) {
    int32_t cube = c.n(Op::Mul, t, c.n(Op::Mul, t, x, x), x);
    int32_t inner = c.n(Op::Mul, t, c.c(kGeluBeta, t), c.n(Op::Add, t, x, c.n(Op::Mul, t, c.c(kGeluKappa, t), cube)));
    c.store(0, c.n(Op::Mul, t, half_x, c.n(Op::Add, t, c.c(1, t), c.n(Op::Tanh, t, inner))));
  } else {
    int32_t e = c.n(Op::Erf, t, c.n(Op::Mul, t, x, c.c(kSqrt1_2, t)));
    c.store(0, c.n(Op::Mul, t, half_x, c.n(Op::Add, t, c.c(1, t), e)));
  }
}

void gelu_backward(LowerCtx& c) {
  c.pointwise_space();
  DType t = float_compute_of(c, {0, 1});
  int32_t g = c.value(0, t), x = c.value(1, t);
  int32_t one = c.c(1, t), half = c.c(0.5, t);
  int32_t grad_in;
  if (tanh_approximation(c, 2)) {
    int32_t x_sq = c.n(Op::Mul, t, x, x);
    int32_t x_cube = c.n(Op::Mul, t, x_sq, x);
    int32_t inner = c.n(Op::Mul, t, c.c(kGeluBeta, t), c.n(Op::Add, t, x, c.n(Op::Mul, t, c.c(kGeluKappa, t), x_cube)));
    int32_t th = c.n(Op::Tanh, t, inner);
    int32_t left = c.n(Op::Mul, t, half, x);
    int32_t right = c.n(Op::Add, t, one, th);
    int32_t left_d = c.n(Op::Mul, t, half, right);
    int32_t tanh_d = c.n(Op::Sub, t, one, c.n(Op::Mul, t, th, th));
    int32_t inner_d =
        c.n(Op::Mul, t, c.c(kGeluBeta, t), c.n(Op::Add, t, one, c.n(Op::Mul, t, c.c(3 * kGeluKappa, t), x_sq)));
    int32_t right_d = c.n(Op::Mul, t, c.n(Op::Mul, t, left, tanh_d), inner_d);
    grad_in = c.n(Op::Mul, t, g, c.n(Op::Add, t, left_d, right_d));
  } else {
    constexpr double kAlpha = kSqrt1_2;
    constexpr double kBeta = 1.12837916709551257390 * kSqrt1_2 * 0.5;  // 1/sqrt(2*pi)
    int32_t cdf = c.n(Op::Mul, t, half, c.n(Op::Add, t, one, c.n(Op::Erf, t, c.n(Op::Mul, t, x, c.c(kAlpha, t)))));
    int32_t pdf = c.n(Op::Mul, t, c.c(kBeta, t), c.n(Op::Exp, t, c.n(Op::Mul, t, c.c(-0.5, t), c.n(Op::Mul, t, x, x))));
    grad_in = c.n(Op::Mul, t, g, c.n(Op::Add, t, cdf, c.n(Op::Mul, t, x, pdf)));
  }
  c.store(0, grad_in);
}

void silu(LowerCtx& c) {
  c.pointwise_space();
  DType t = float_compute_of(c, {0});
  int32_t x = c.value(0, t);
  c.store(0, c.n(Op::Div, t, x, c.n(Op::Add, t, c.c(1, t), c.n(Op::Exp, t, c.n(Op::Neg, t, x)))));
}

void silu_backward(LowerCtx& c) {
  c.pointwise_space();
  DType t = float_compute_of(c, {0, 1});
  int32_t g = c.value(0, t), x = c.value(1, t), one = c.c(1, t);
  int32_t sig = c.n(Op::Div, t, one, c.n(Op::Add, t, one, c.n(Op::Exp, t, c.n(Op::Neg, t, x))));
  int32_t inner = c.n(Op::Add, t, one, c.n(Op::Mul, t, x, c.n(Op::Sub, t, one, sig)));
  c.store(0, c.n(Op::Mul, t, c.n(Op::Mul, t, g, sig), inner));
}

void threshold_backward(LowerCtx& c) {
  c.pointwise_space();
  DType t = compute_of(c, {0, 1});
  int32_t below = c.n(Op::Le, DType::Bool, c.value(1, t), c.value(2, t));
  c.store(0, c.n(Op::Where, t, below, c.c(0, t), c.value(0, t)));
}

void sigmoid_backward(LowerCtx& c) {
  c.pointwise_space();
  DType t = float_compute_of(c, {0, 1});
  int32_t g = c.value(0, t), y = c.value(1, t);
  c.store(0, c.n(Op::Mul, t, c.n(Op::Mul, t, g, c.n(Op::Sub, t, c.c(1, t), y)), y));
}

void tanh_backward(LowerCtx& c) {
  c.pointwise_space();
  DType t = float_compute_of(c, {0, 1});
  int32_t g = c.value(0, t), y = c.value(1, t);
  c.store(0, c.n(Op::Mul, t, g, c.n(Op::Sub, t, c.c(1, t), c.n(Op::Mul, t, y, y))));
}

// ------------------------------------------------------------ reductions

std::vector<int64_t> dims_arg(LowerCtx& c, size_t i) {
  if (!c.present(i)) return {};
  const c10::IValue& v = c.arg(i);
  if (v.isInt()) return {v.toInt()};
  if (v.isIntList()) return v.toIntVector();
  throw Decline{};
}

// The dtype a float reduction accumulates in: double, as eager's reductions
// are at least that accurate; integers in int64.
DType accumulate_of(DType t) { return ir::is_floating(t) ? DType::Float64 : DType::Int64; }

// A float sum, mean or prod is a library kernel: its last bits depend on the
// order eager's kernel adds in (a cascade sum whose shape follows the CPU's
// vector width), which a fused loop does not reproduce. Integer and bool
// reductions are exact in any order and are traced. Composite ops that only
// use sums inside (softmax, var, layer norm) are traced: eager's own
// algorithms for them differ from a plain sum anyway.
DType exact_accumulator(LowerCtx& c) {
  DType acc = accumulate_of(LowerCtx::dtype(c.out(0).scalar_type()));
  if (ir::is_floating(acc)) throw Decline{};
  return acc;
}

// sum.dim_IntList(self, dim, keepdim, *, dtype) and sum(self, *, dtype).
void sum(LowerCtx& c) {
  const bool has_dims = c.num_args() > 1 && (c.arg(1).isIntList() || c.arg(1).isNone());
  c.reduction_space(0, has_dims ? dims_arg(c, 1) : std::vector<int64_t>{});
  DType acc = exact_accumulator(c);
  c.store(0, c.op().reduce(ir::ReduceKind::Sum, acc, c.value(0, acc)));
}

void prod(LowerCtx& c) {
  // prod(self, *, dtype) and prod.out(self, *, dtype, out) have no dim; prod.dim_int and prod.int_out do.
  const std::string overload = c.overload();
  const bool has_dim = overload == "dim_int" || overload == "int_out";
  c.reduction_space(0, has_dim ? std::vector<int64_t>{c.arg(1).toInt()} : std::vector<int64_t>{});
  DType acc = exact_accumulator(c);
  c.store(0, c.op().reduce(ir::ReduceKind::Prod, acc, c.value(0, acc)));
}

void extreme(LowerCtx& c, ir::ReduceKind kind) {  // amax / amin
  c.reduction_space(0, dims_arg(c, 1));
  DType t = compute_of(c, {0});
  if (t == DType::Bool) throw Decline{};
  c.store(0, c.op().reduce(kind, t, c.value(0, t)));
}

void extreme_with_index(LowerCtx& c, bool is_max) {  // max.dim / min.dim -> (values, indices)
  if (c.num_outputs() != 2 || !c.arg(1).isInt()) throw Decline{};
  c.reduction_space(0, {c.arg(1).toInt()});
  DType t = compute_of(c, {0});
  if (t == DType::Bool) throw Decline{};
  int32_t x = c.value(0, t);
  c.store(0, c.op().reduce(is_max ? ir::ReduceKind::Max : ir::ReduceKind::Min, t, x));
  c.store(1, c.op().reduce(is_max ? ir::ReduceKind::ArgMax : ir::ReduceKind::ArgMin, DType::Int64, x));
}

void arg_extreme(LowerCtx& c, bool is_max) {
  c.reduction_space(0, dims_arg(c, 1));
  DType t = compute_of(c, {0});
  c.store(0, c.op().reduce(is_max ? ir::ReduceKind::ArgMax : ir::ReduceKind::ArgMin, DType::Int64, c.value(0, t)));
}

void any_all(LowerCtx& c, bool any) {
  c.reduction_space(0, dims_arg(c, 1));
  c.store(0, c.op().reduce(any ? ir::ReduceKind::Any : ir::ReduceKind::All, DType::Bool, c.value(0, DType::Bool)));
}

// var/std(self, dim, *, correction, keepdim): two passes in double (eager's Welford in double).
void var_std(LowerCtx& c, bool is_std) {
  exact_only_in_full_floats(c);
  c.reduction_space(0, dims_arg(c, 1));
  DType out = LowerCtx::dtype(c.out(0).scalar_type());
  if (!ir::is_floating(out)) throw Decline{};
  // A float32 reduction to one element takes eager's float32 mean first
  // (std_var_all_cpu), which overflows where a double one does not: a
  // float sum, so a library kernel (see exact_accumulator).
  if (c.out(0).numel() == 1 && c.tensor(0).scalar_type() == at::kFloat) throw Decline{};
  const DType acc = DType::Float64;
  double correction = 1;
  if (c.present(2)) correction = c.scalar_value(2);
  int32_t x = c.value(0, acc);
  int32_t n = c.op().cast(c.op().scalar_int(c.reduced_count()), acc);
  int32_t mean = c.n(Op::Div, acc, c.op().reduce(ir::ReduceKind::Sum, acc, x), n);
  int32_t d = c.n(Op::Sub, acc, x, mean);
  int32_t m2 = c.op().reduce(ir::ReduceKind::Sum, acc, c.n(Op::Mul, acc, d, d));
  int32_t dof = c.n(Op::MaxFirstNaN, acc, c.n(Op::Sub, acc, n, c.op().scalar_float(correction)), c.c(0, acc));
  int32_t var = c.n(Op::Div, acc, m2, dof);
  c.store(0, is_std ? c.n(Op::Sqrt, acc, var) : var);
}

void logsumexp(LowerCtx& c) {
  exact_only_in_full_floats(c);
  c.reduction_space(0, dims_arg(c, 1));
  DType t = float_compute_of(c, {0});
  int32_t x = c.value(0, t);
  int32_t m = c.op().reduce(ir::ReduceKind::Max, t, x);
  // eager zeroes infinite maxima before subtracting them
  int32_t m0 = c.n(Op::Where, t, c.n(Op::IsInf, DType::Bool, m), c.c(0, t), m);
  int32_t s = c.op().reduce(ir::ReduceKind::Sum, t, c.n(Op::Exp, t, c.n(Op::Sub, t, x, m0)));
  c.store(0, c.n(Op::Add, t, c.n(Op::Log, t, s), m0));
}

// linalg_vector_norm(self, ord, dim, keepdim, *, dtype)
void vector_norm(LowerCtx& c) {
  exact_only_in_full_floats(c);
  c.reduction_space(0, dims_arg(c, 2));
  DType t = LowerCtx::opmath(c.out(0).scalar_type());
  if (!ir::is_floating(t)) throw Decline{};
  const double p = c.present(1) ? c.scalar_value(1) : 2.0;
  const DType acc = DType::Float64;
  int32_t a = c.n(Op::Abs, acc, c.value(0, acc));
  int32_t r;
  if (p == 2) r = c.n(Op::Sqrt, acc, c.op().reduce(ir::ReduceKind::Sum, acc, c.n(Op::Mul, acc, a, a)));
  else if (p == 1) r = c.op().reduce(ir::ReduceKind::Sum, acc, a);
  else if (std::isinf(p)) r = c.op().reduce(p > 0 ? ir::ReduceKind::Max : ir::ReduceKind::Min, acc, a);
  else throw Decline{};
  c.store(0, r);
}

// _softmax(self, dim, half_to_float): max, sum of exp(x - max), then the store loop.
void softmax(LowerCtx& c, bool log) {
  exact_only_in_full_floats(c);
  c.reduction_space(0, {c.arg(1).toInt()});
  DType t = LowerCtx::opmath(c.out(0).scalar_type());
  if (!ir::is_floating(t)) throw Decline{};  // eager accepts integers only for empty inputs
  int32_t x = c.value(0, t);
  int32_t m = c.op().reduce(ir::ReduceKind::Max, t, x);
  int32_t shifted = c.n(Op::Sub, t, x, m);
  int32_t s = c.op().reduce(ir::ReduceKind::Sum, t, c.n(Op::Exp, t, shifted));
  if (log) c.store(0, c.n(Op::Sub, t, shifted, c.n(Op::Log, t, s)));
  else c.store(0, c.n(Op::Mul, t, c.n(Op::Exp, t, shifted), c.n(Op::Reciprocal, t, s)));
}

// _softmax_backward_data(grad_output, output, dim, input_dtype)
void softmax_backward(LowerCtx& c, bool log) {
  exact_only_in_full_floats(c);
  c.reduction_space(0, {c.arg(2).toInt()});
  DType t = LowerCtx::opmath(c.out(0).scalar_type());
  if (!ir::is_floating(t)) throw Decline{};
  int32_t g = c.value(0, t), y = c.value(1, t);
  if (log) {
    int32_t s = c.op().reduce(ir::ReduceKind::Sum, t, g);
    c.store(0, c.n(Op::Sub, t, g, c.n(Op::Mul, t, c.n(Op::Exp, t, y), s)));
  } else {
    int32_t s = c.op().reduce(ir::ReduceKind::Sum, t, c.n(Op::Mul, t, g, y));
    c.store(0, c.n(Op::Mul, t, y, c.n(Op::Sub, t, g, s)));
  }
}

// native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd)
void layer_norm(LowerCtx& c) {
  const at::Tensor& x = c.tensor(0);
  const auto shape = c.arg(1).toIntVector();
  // Reduced float inputs keep the library kernel: eager's mean/rstd dtypes differ from the meta kernel's.
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kDouble) throw Decline{};
  std::vector<int64_t> dims;
  for (size_t i = 0; i < shape.size(); ++i) dims.push_back(x.dim() - static_cast<int64_t>(shape.size()) + i);
  if (dims.empty()) throw Decline{};
  c.reduction_space(0, dims);
  const DType t = LowerCtx::opmath(x.scalar_type()), acc = DType::Float64;
  int32_t v = c.value(0, acc);
  int32_t n = c.op().cast(c.op().scalar_int(c.reduced_count()), acc);
  int32_t mean = c.n(Op::Div, acc, c.op().reduce(ir::ReduceKind::Sum, acc, v), n);
  int32_t d = c.n(Op::Sub, acc, v, mean);
  int32_t var = c.n(Op::Div, acc, c.op().reduce(ir::ReduceKind::Sum, acc, c.n(Op::Mul, acc, d, d)), n);
  int32_t rstd = c.n(Op::Rsqrt, t, c.n(Op::Add, t, c.op().cast(var, t), c.value(4, t)));
  int32_t y = c.n(Op::Mul, t, c.n(Op::Sub, t, c.value(0, t), c.op().cast(mean, t)), rstd);
  if (c.present(2)) y = c.n(Op::Mul, t, y, c.value(2, t));
  if (c.present(3)) y = c.n(Op::Add, t, y, c.value(3, t));
  c.store(0, y);
  c.store(1, c.op().cast(mean, t));
  c.store(2, rstd);
}

// ------------------------------------------------------------ the table

const std::unordered_map<std::string, Lower>& table() {
  static const std::unordered_map<std::string, Lower> t = {
      // arithmetic
      {"add", [](LowerCtx& c) { add_sub(c, false); }},
      {"sub", [](LowerCtx& c) { add_sub(c, true); }},
      {"mul", [](LowerCtx& c) { binary(c, Op::Mul, false); }},
      {"div", div},
      {"pow", pow},
      {"maximum", [](LowerCtx& c) { binary(c, Op::MaxEitherNaN, false); }},
      {"minimum", [](LowerCtx& c) { binary(c, Op::MinEitherNaN, false); }},
      {"atan2", [](LowerCtx& c) { binary(c, Op::Atan2, true); }},
      {"lerp", lerp},
      {"addcmul", [](LowerCtx& c) { addc(c, Op::Mul); }},
      {"addcdiv", [](LowerCtx& c) { addc(c, Op::Div); }},
      // comparisons and logic
      {"eq", [](LowerCtx& c) { compare(c, Op::Eq); }},
      {"ne", [](LowerCtx& c) { compare(c, Op::Ne); }},
      {"lt", [](LowerCtx& c) { compare(c, Op::Lt); }},
      {"le", [](LowerCtx& c) { compare(c, Op::Le); }},
      {"gt", [](LowerCtx& c) { compare(c, Op::Gt); }},
      {"ge", [](LowerCtx& c) { compare(c, Op::Ge); }},
      {"logical_and", [](LowerCtx& c) { logical(c, Op::And); }},
      {"logical_or", [](LowerCtx& c) { logical(c, Op::Or); }},
      {"logical_xor", [](LowerCtx& c) { logical(c, Op::Xor); }},
      {"logical_not",
       [](LowerCtx& c) {
         c.pointwise_space();
         c.store(0, c.n(Op::Not, DType::Bool, c.value(0, DType::Bool)));
       }},
      {"bitwise_and", [](LowerCtx& c) { bitwise(c, Op::BitAnd); }},
      {"bitwise_or", [](LowerCtx& c) { bitwise(c, Op::BitOr); }},
      {"bitwise_xor", [](LowerCtx& c) { bitwise(c, Op::BitXor); }},
      {"bitwise_not",
       [](LowerCtx& c) {
         c.pointwise_space();
         DType t = compute_of(c, {0});
         if (ir::is_floating(t)) throw Decline{};
         c.store(0, c.n(t == DType::Bool ? Op::Not : Op::BitNot, t, c.value(0, t)));
       }},
      {"where", where},
      {"clamp", [](LowerCtx& c) { clamp(c, true, true); }},
      {"clamp_min", [](LowerCtx& c) { clamp_one(c, true); }},
      {"clamp_max", [](LowerCtx& c) { clamp_one(c, false); }},
      {"isnan",
       [](LowerCtx& c) {
         c.pointwise_space();
         DType t = compute_of(c, {0});
         c.store(0, c.n(Op::IsNan, DType::Bool, c.value(0, t)));
       }},
      {"isinf",
       [](LowerCtx& c) {
         c.pointwise_space();
         DType t = compute_of(c, {0});
         c.store(0, c.n(Op::IsInf, DType::Bool, c.value(0, t)));
       }},
      {"isposinf", [](LowerCtx& c) { equals_infinity(c, 1); }},
      {"isneginf", [](LowerCtx& c) { equals_infinity(c, -1); }},
      // unary
      {"neg", [](LowerCtx& c) { unary(c, Op::Neg, false); }},
      {"abs", [](LowerCtx& c) { unary(c, Op::Abs, false); }},
      {"sign", [](LowerCtx& c) { unary(c, Op::Sign, false); }},
      {"floor", [](LowerCtx& c) { unary(c, Op::Floor, false); }},
      {"ceil", [](LowerCtx& c) { unary(c, Op::Ceil, false); }},
      {"trunc", [](LowerCtx& c) { unary(c, Op::Trunc, false); }},
      {"round",
       [](LowerCtx& c) {
         if (c.present(1)) throw Decline{};
         unary(c, Op::Round, false);
       }},
      {"exp", [](LowerCtx& c) { unary(c, Op::Exp, true); }},
      {"exp2", [](LowerCtx& c) { unary(c, Op::Exp2, true); }},
      {"expm1", [](LowerCtx& c) { unary(c, Op::Expm1, true); }},
      {"log", [](LowerCtx& c) { unary(c, Op::Log, true); }},
      {"log1p", [](LowerCtx& c) { unary(c, Op::Log1p, true); }},
      {"log2", [](LowerCtx& c) { unary(c, Op::Log2, true); }},
      {"log10", [](LowerCtx& c) { unary(c, Op::Log10, true); }},
      {"sqrt", [](LowerCtx& c) { unary(c, Op::Sqrt, true); }},
      {"rsqrt", [](LowerCtx& c) { unary(c, Op::Rsqrt, true); }},
      {"reciprocal", [](LowerCtx& c) { unary(c, Op::Reciprocal, true); }},
      {"sin", [](LowerCtx& c) { unary(c, Op::Sin, true); }},
      {"cos", [](LowerCtx& c) { unary(c, Op::Cos, true); }},
      {"tan", [](LowerCtx& c) { unary(c, Op::Tan, true); }},
      {"tanh", [](LowerCtx& c) { unary(c, Op::Tanh, true); }},
      {"sinh", [](LowerCtx& c) { unary(c, Op::Sinh, true); }},
      {"cosh", [](LowerCtx& c) { unary(c, Op::Cosh, true); }},
      {"asin", [](LowerCtx& c) { unary(c, Op::Asin, true); }},
      {"acos", [](LowerCtx& c) { unary(c, Op::Acos, true); }},
      {"atan", [](LowerCtx& c) { unary(c, Op::Atan, true); }},
      {"asinh", [](LowerCtx& c) { unary(c, Op::Asinh, true); }},
      {"acosh", [](LowerCtx& c) { unary(c, Op::Acosh, true); }},
      {"atanh", [](LowerCtx& c) { unary(c, Op::Atanh, true); }},
      {"erf", [](LowerCtx& c) { unary(c, Op::Erf, true); }},
      {"erfc", [](LowerCtx& c) { unary(c, Op::Erfc, true); }},
      {"sigmoid", [](LowerCtx& c) { unary(c, Op::Sigmoid, true); }},
      // activations and their backward ops
      {"relu", relu},
      {"gelu", gelu},
      {"gelu_backward", gelu_backward},
      {"silu", silu},
      {"silu_backward", silu_backward},
      {"threshold_backward", threshold_backward},
      {"sigmoid_backward", sigmoid_backward},
      {"tanh_backward", tanh_backward},
      // fills and copies
      {"fill", fill},
      {"zero", zero},
      {"_to_copy", copy_cast},
      {"clone", copy_cast},
      {"copy", copy_in_place},
      // reductions
      {"sum", sum},
      {"prod", prod},
      {"amax", [](LowerCtx& c) { extreme(c, ir::ReduceKind::Max); }},
      {"amin", [](LowerCtx& c) { extreme(c, ir::ReduceKind::Min); }},
      {"max", [](LowerCtx& c) { extreme_with_index(c, true); }},
      {"min", [](LowerCtx& c) { extreme_with_index(c, false); }},
      {"argmax", [](LowerCtx& c) { arg_extreme(c, true); }},
      {"argmin", [](LowerCtx& c) { arg_extreme(c, false); }},
      {"any", [](LowerCtx& c) { any_all(c, true); }},
      {"all", [](LowerCtx& c) { any_all(c, false); }},
      {"var", [](LowerCtx& c) { var_std(c, false); }},
      {"std", [](LowerCtx& c) { var_std(c, true); }},
      {"logsumexp", logsumexp},
      {"linalg_vector_norm", vector_norm},
      {"_softmax", [](LowerCtx& c) { softmax(c, false); }},
      {"_log_softmax", [](LowerCtx& c) { softmax(c, true); }},
      {"_softmax_backward_data", [](LowerCtx& c) { softmax_backward(c, false); }},
      {"_log_softmax_backward_data", [](LowerCtx& c) { softmax_backward(c, true); }},
      {"native_layer_norm", layer_norm},
  };
  return t;
}

// "aten::add_.Tensor" -> "add": the family, shared by functional, in-place and out= overloads.
std::string family(const std::string& qualified) {
  std::string name = qualified.rfind("aten::", 0) == 0 ? qualified.substr(6) : qualified;
  name = name.substr(0, name.find('.'));
  if (name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_') name.pop_back();
  return name;
}

}  // namespace

LoweringFn find_lowering(const std::string& op_name) {
  auto it = table().find(family(op_name));
  return it == table().end() ? nullptr : it->second;
}

}  // namespace kiln::dispatch
