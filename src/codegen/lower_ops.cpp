#include "codegen/lower_ops.h"

#include <limits>
#include <stdexcept>
#include <string>

#include "codegen/llvm_calls.h"
#include "codegen/value_types.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::Op;
using llvm::Value;

constexpr double kLargestExpfArgument = 88.72283172607421875;  // the largest float x with expf(x) finite

// Eager's vectorized float kernels (which every tensor of 32 floats or
// more takes) compute sinh and cosh through expf(|x|): infinite once that
// overflows, at |x| > ln(FLT_MAX), where libm's sinhf stays finite up to
// 89.4. kiln gives the vectorized kernels' answer (eager's scalar tail
// loop gives libm's; docs/fusion.md, "Numerics").
Value* sinh_cosh(llvm::IRBuilderBase& b, Value* x, bool cosh) {
  Value* r = call_libm(b, cosh ? "cosh" : "sinh", {x});
  if (!x->getType()->isFloatTy()) return r;
  llvm::Type* ty = x->getType();
  Value* inf = fconst(ty, std::numeric_limits<double>::infinity());
  Value* overflow = b.CreateFCmpOGT(call_intrinsic(b, llvm::Intrinsic::fabs, {x}), fconst(ty, kLargestExpfArgument));
  return b.CreateSelect(overflow, cosh ? inf : call_intrinsic(b, llvm::Intrinsic::copysign, {inf, x}), r);
}

// Ops defined for integers and floats alike; null for any other op.
Value* lower_unary_any_type(llvm::IRBuilderBase& b, Op op, Value* x, DType t) {
  llvm::Type* ty = x->getType();
  const bool f = ir::is_floating(t);
  switch (op) {
    case Op::Neg: return f ? b.CreateFNeg(x) : b.CreateNeg(x);
    case Op::Abs:
      if (f) return call_intrinsic(b, llvm::Intrinsic::fabs, {x});
      if (is_unsigned(t)) return x;
      return call_intrinsic(b, llvm::Intrinsic::abs, {x, b.getFalse()});
    case Op::Not: return b.CreateNot(t == DType::Bool ? x : b.CreateICmpNE(x, llvm::ConstantInt::get(ty, 0)));
    case Op::BitNot: return b.CreateNot(x);
    case Op::Floor: return f ? call_intrinsic(b, llvm::Intrinsic::floor, {x}) : x;
    case Op::Ceil: return f ? call_intrinsic(b, llvm::Intrinsic::ceil, {x}) : x;
    case Op::Round: return f ? call_intrinsic(b, llvm::Intrinsic::roundeven, {x}) : x;
    case Op::Trunc: return f ? call_intrinsic(b, llvm::Intrinsic::trunc, {x}) : x;
    case Op::IsNan: return f ? b.CreateFCmpUNO(x, x) : b.getFalse();
    case Op::IsInf:
      return f ? b.CreateFCmpOEQ(call_intrinsic(b, llvm::Intrinsic::fabs, {x}),
                                 fconst(ty, std::numeric_limits<double>::infinity()))
               : b.getFalse();
    case Op::Sign: {
      if (t == DType::Bool) return x;
      Value* zero = f ? fconst(ty, 0) : llvm::ConstantInt::get(ty, 0);
      Value* pos =
          f ? b.CreateFCmpOLT(zero, x) : (is_unsigned(t) ? b.CreateICmpULT(zero, x) : b.CreateICmpSLT(zero, x));
      Value* neg = f ? b.CreateFCmpOLT(x, zero) : (is_unsigned(t) ? b.getFalse() : b.CreateICmpSLT(x, zero));
      if (f) return b.CreateFSub(b.CreateUIToFP(pos, ty), b.CreateUIToFP(neg, ty));
      return b.CreateSub(b.CreateZExt(pos, ty), b.CreateZExt(neg, ty));
    }
    default: return nullptr;
  }
}

// The math functions: floats only.
Value* lower_unary_float(llvm::IRBuilderBase& b, FloatMath& math, Op op, Value* x) {
  llvm::Type* ty = x->getType();
  llvm::Intrinsic::ID id = llvm::Intrinsic::not_intrinsic;
  switch (op) {
    case Op::Exp: return math.exp(x);
    case Op::Exp2: id = llvm::Intrinsic::exp2; break;
    case Op::Log: id = llvm::Intrinsic::log; break;
    case Op::Log2: id = llvm::Intrinsic::log2; break;
    case Op::Log10: id = llvm::Intrinsic::log10; break;
    case Op::Sqrt: id = llvm::Intrinsic::sqrt; break;
    case Op::Sin: id = llvm::Intrinsic::sin; break;
    case Op::Cos: id = llvm::Intrinsic::cos; break;
    case Op::Tan: id = llvm::Intrinsic::tan; break;
    default: break;
  }
  if (id == llvm::Intrinsic::sin && ty->isFloatTy()) return math.sin(x);
  if (id == llvm::Intrinsic::cos && ty->isFloatTy()) return math.cos(x);
  if (id != llvm::Intrinsic::not_intrinsic) return call_intrinsic(b, id, {x});
  switch (op) {
    case Op::Rsqrt: return b.CreateFDiv(fconst(ty, 1), call_intrinsic(b, llvm::Intrinsic::sqrt, {x}));
    case Op::Reciprocal: return b.CreateFDiv(fconst(ty, 1), x);
    case Op::Sigmoid: return b.CreateFDiv(fconst(ty, 1), b.CreateFAdd(fconst(ty, 1), math.exp(b.CreateFNeg(x))));
    case Op::Tanh:
      if (ty->isFloatTy()) return math.tanh(x);
      return call_libm(b, "tanh", {x});
    case Op::Erf:
      if (ty->isFloatTy()) return math.erf(x);
      return call_libm(b, "erf", {x});
    case Op::Expm1: return call_libm(b, "expm1", {x});
    case Op::Log1p: return call_libm(b, "log1p", {x});
    case Op::Sinh:
    case Op::Cosh: return sinh_cosh(b, x, op == Op::Cosh);
    case Op::Asin: return call_libm(b, "asin", {x});
    case Op::Acos: return call_libm(b, "acos", {x});
    case Op::Atan: return call_libm(b, "atan", {x});
    case Op::Asinh: return call_libm(b, "asinh", {x});
    case Op::Acosh: return call_libm(b, "acosh", {x});
    case Op::Atanh: return call_libm(b, "atanh", {x});
    case Op::Erfc: return call_libm(b, "erfc", {x});
    default: break;
  }
  throw std::runtime_error(std::string("kiln codegen: no lowering for ") + ir::op_name(op));
}

}  // namespace

Value* lower_unary(llvm::IRBuilderBase& b, FloatMath& math, Op op, Value* x, DType t) {
  if (Value* v = lower_unary_any_type(b, op, x, t)) return v;
  if (!ir::is_floating(t))
    throw std::runtime_error(std::string("kiln codegen: ") + ir::op_name(op) + " on " + ir::dtype_name(t));
  return lower_unary_float(b, math, op, x);
}

Value* lower_compare(llvm::IRBuilderBase& b, Op op, Value* x, Value* y, DType t) {
  if (ir::is_floating(t)) {
    switch (op) {
      case Op::Eq: return b.CreateFCmpOEQ(x, y);
      case Op::Ne: return b.CreateFCmpUNE(x, y);
      case Op::Lt: return b.CreateFCmpOLT(x, y);
      case Op::Le: return b.CreateFCmpOLE(x, y);
      case Op::Gt: return b.CreateFCmpOGT(x, y);
      default: return b.CreateFCmpOGE(x, y);
    }
  }
  const bool u = is_unsigned(t);
  switch (op) {
    case Op::Eq: return b.CreateICmpEQ(x, y);
    case Op::Ne: return b.CreateICmpNE(x, y);
    case Op::Lt: return u ? b.CreateICmpULT(x, y) : b.CreateICmpSLT(x, y);
    case Op::Le: return u ? b.CreateICmpULE(x, y) : b.CreateICmpSLE(x, y);
    case Op::Gt: return u ? b.CreateICmpUGT(x, y) : b.CreateICmpSGT(x, y);
    default: return u ? b.CreateICmpUGE(x, y) : b.CreateICmpSGE(x, y);
  }
}

Value* lower_binary(llvm::IRBuilderBase& b, Op op, Value* x, Value* y, DType t) {
  const bool f = ir::is_floating(t);
  const bool boolean = t == DType::Bool;
  switch (op) {
    case Op::Add: return f ? b.CreateFAdd(x, y) : (boolean ? b.CreateOr(x, y) : b.CreateAdd(x, y));
    case Op::Sub: return f ? b.CreateFSub(x, y) : (boolean ? b.CreateXor(x, y) : b.CreateSub(x, y));
    case Op::Mul: return f ? b.CreateFMul(x, y) : (boolean ? b.CreateAnd(x, y) : b.CreateMul(x, y));
    case Op::Div:
      if (!f) throw std::runtime_error("kiln codegen: integer division is not lowered (division by zero must raise)");
      return b.CreateFDiv(x, y);
    case Op::Pow:
      if (!f) throw std::runtime_error("kiln codegen: integer pow is not lowered");
      return call_intrinsic(b, llvm::Intrinsic::pow, {x, y});
    case Op::Atan2: return call_libm(b, "atan2", {x, y});
    case Op::Fmod:
      if (!f) throw std::runtime_error("kiln codegen: integer fmod is not lowered");
      return b.CreateFRem(x, y);
    case Op::CopySign: return call_intrinsic(b, llvm::Intrinsic::copysign, {x, y});
    // NaN if either is NaN (x + y is that NaN), else maxnum/minnum; a tie
    // of +0 and -0 gives either, as eager's loops do (its vector loop the
    // second, its scalar loop the first). Not llvm.maximum/minimum: LLVM 19
    // narrows them to half vectors, whose x86 lowering returns -0 for
    // minimum(-0, NaN). Nor a compare-and-select: InstCombine folds
    // select(isnan(a), a, select(a > 0, a, 0)) with a = fabs(x) into a
    // compare of x itself (x > 0), which drops negative x.
    case Op::MaxEitherNaN:
    case Op::MinEitherNaN: {
      const bool is_max = op == Op::MaxEitherNaN;
      if (!f) {
        const bool u = is_unsigned(t);
        return call_intrinsic(b,
                              is_max ? (u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax)
                                     : (u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin),
                              {x, y});
      }
      Value* picked = call_intrinsic(b, is_max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, {x, y});
      return b.CreateSelect(b.CreateFCmpUNO(x, y), b.CreateFAdd(x, y), picked);
    }
    // std::max / std::min: a NaN in the first operand propagates (clamp).
    case Op::MaxFirstNaN: return b.CreateSelect(lower_compare(b, Op::Lt, x, y, t), y, x);
    case Op::MinFirstNaN: return b.CreateSelect(lower_compare(b, Op::Lt, y, x, t), y, x);
    case Op::Eq:
    case Op::Ne:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge: return lower_compare(b, op, x, y, t);
    case Op::And: return b.CreateAnd(x, y);
    case Op::Or: return b.CreateOr(x, y);
    case Op::Xor: return b.CreateXor(x, y);
    case Op::BitAnd: return b.CreateAnd(x, y);
    case Op::BitOr: return b.CreateOr(x, y);
    case Op::BitXor: return b.CreateXor(x, y);
    default: break;
  }
  throw std::runtime_error(std::string("kiln codegen: no lowering for ") + ir::op_name(op));
}

}  // namespace kiln::codegen
