// kiln's float sin and cos. Both reduce to (-1)^n sin(r): x = r + q pi/2
// with q = 2n (sin) or 2n + 1 (cos), |r| <= pi/2, then one odd polynomial
// (SLEEF's sinf_u35; measured within 1.7 ulp) instead of a sin and a cos
// polynomial and a quadrant select. NaN and infinities give NaN.
#include <limits>

#include "codegen/float_math.h"
#include "codegen/llvm_calls.h"

namespace kiln::codegen {

using llvm::Value;

// sin(-0) is -0; the reduction's parts of pi/2 of either sign turn -0 into
// +0 (-0 + +0), so zeros pass through.
Value* FloatMath::sin(Value* x) {
  return b_.CreateSelect(b_.CreateFCmpOEQ(x, fconst(x->getType(), 0)), x, sin_or_cos(x, false));
}

Value* FloatMath::cos(Value* x) { return sin_or_cos(x, true); }

// The double reduction (pi/2 in two parts, with FMAs) is accurate while
// x / pi fits a double's integers (|x| < 2^50). In the exact loop of a
// rerun, larger finite x branch to libm's double sin/cos (which reduce
// exactly). Pointwise kernels take that loop when an argument is large
// (Lowering::emit_pointwise); row kernels, which have no such loop, get no
// float sin/cos from fusion.
Value* FloatMath::sin_or_cos(Value* x, bool cosine) {
  if (sin_cos_ == SinCos::FloatTracked) return sin_or_cos_in_float(x, cosine);
  llvm::Type* f64 = b_.getDoubleTy();
  auto k = [&](double v) { return fconst(f64, v); };
  Value* xd = b_.CreateFPExt(x, f64);
  Value* n = call_intrinsic(b_, llvm::Intrinsic::roundeven, {muladd(xd, k(kInvPi), k(cosine ? -0.5 : 0))});
  Value* r = subtract_half_pis(xd, n, cosine, {1.57079632679489655800, 6.12323399573676603587e-17});
  Value* finite = b_.CreateFCmpOLT(call_intrinsic(b_, llvm::Intrinsic::fabs, {n}), k(9.0e15));
  Value* ni = b_.CreateTrunc(b_.CreateFPToSI(b_.CreateSelect(finite, n, k(0)), b_.getInt64Ty()),
                             b_.getInt32Ty());  // n may pass 2^31
  if (cosine) ni = b_.CreateAdd(ni, b_.getInt32(1));
  Value* reduced = sin_reduced(b_.CreateFPTrunc(r, x->getType()), ni);
  if (sin_cos_ != SinCos::Exact) return reduced;
  Value* ax = call_intrinsic(b_, llvm::Intrinsic::fabs, {xd});
  Value* huge = b_.CreateAnd(b_.CreateFCmpOGE(ax, k(kHugeSinLimit)),
                             b_.CreateFCmpONE(ax, k(std::numeric_limits<double>::infinity())));
  auto* from = b_.GetInsertBlock();
  auto* call = llvm::BasicBlock::Create(b_.getContext(), "sincos.huge", from->getParent());
  auto* done = llvm::BasicBlock::Create(b_.getContext(), "sincos.done", from->getParent());
  b_.CreateCondBr(huge, call, done);
  b_.SetInsertPoint(call);
  Value* exact = b_.CreateFPTrunc(call_libm(b_, cosine ? "cos" : "sin", {xd}), x->getType());
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  auto* phi = b_.CreatePHI(x->getType(), 2);
  phi->addIncoming(reduced, from);
  phi->addIncoming(exact, call);
  return phi;
}

void FloatMath::track_largest(Value* x, Value* slot) {
  Value* magnitude = b_.CreateAnd(b_.CreateBitCast(x, b_.getInt32Ty()), b_.getInt32(0x7fffffff));
  Value* largest = b_.CreateLoad(b_.getInt32Ty(), slot);
  b_.CreateStore(call_intrinsic(b_, llvm::Intrinsic::umax, {largest, magnitude}), slot);
}

Value* FloatMath::beyond_float_sin_cos(Value* largest) {
  return b_.CreateICmpUGT(largest, b_.getInt32(kSmallSinLimitBits));
}

// The same in float alone, for |x| <= kSmallSinLimit: pi/2 in three float
// parts, each product exact inside an FMA, reduces as accurately as the
// double path there (x - q*P1 is exact: a multiple of P1's ulp below 2).
// n is rounded by adding 1.5 * 2^23, which leaves it in the low mantissa
// bits. About twice as fast: no conversions, full-width vectors. The
// largest |x| is kept as its bits, an unsigned maximum (docs/codegen.md,
// "sin and cos"); the caller reruns the loop on the double path when it
// passed the limit (so do infinities and NaN).
Value* FloatMath::sin_or_cos_in_float(Value* x, bool cosine) {
  llvm::Type* f32 = x->getType();
  auto k = [&](double v) { return fconst(f32, v); };
  track_largest(x, largest_slot_);
  Value* t = cosine ? b_.CreateFAdd(muladd(x, k(kInvPi), k(-0.5)), k(kRoundMagic))
                    : call_intrinsic(b_, llvm::Intrinsic::fma, {x, k(kInvPi), k(kRoundMagic)});
  Value* n = b_.CreateFSub(t, k(kRoundMagic));
  Value* r = subtract_half_pis(x, n, cosine, {1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15});
  Value* ni = b_.CreateBitCast(t, b_.getInt32Ty());  // n's parity is its low bit
  if (cosine) ni = b_.CreateAdd(ni, b_.getInt32(1));
  return sin_reduced(r, ni);
}

// x - q pi/2 with q = 2n + 1 (cos) or 2n (sin: n times pi, the doubled
// parts, which stay exact), pi/2 given as parts each exact in x's type and
// subtracted one FMA at a time.
Value* FloatMath::subtract_half_pis(Value* x, Value* n, bool cosine, std::initializer_list<double> half_pi_parts) {
  auto k = [&](double v) { return fconst(x->getType(), v); };
  Value* q = cosine ? muladd(n, k(2), k(1)) : n;
  const double m = cosine ? 1 : 2;
  for (double part : half_pi_parts) x = call_intrinsic(b_, llvm::Intrinsic::fma, {b_.CreateFNeg(q), k(m * part), x});
  return x;
}

// (-1)^n sin(r) for |r| <= pi/2 (a little beyond is fine); only n's low
// bit matters. sin is odd, so the sign goes onto r first.
Value* FloatMath::sin_reduced(Value* r, Value* n) {
  llvm::Type* f32 = r->getType();
  auto k = [&](double v) { return fconst(f32, v); };
  Value* sign = b_.CreateShl(n, 31);
  r = b_.CreateBitCast(b_.CreateXor(b_.CreateBitCast(r, n->getType()), sign), f32);
  Value* s = b_.CreateFMul(r, r);
  Value* u = k(2.6083159809786593541503e-06);
  for (double c : {-0.0001981069071916863322258, 0.00833307858556509017944336, -0.166666597127914428710938}) {
    u = muladd(u, s, k(c));
  }
  return muladd(s, b_.CreateFMul(u, r), r);
}

}  // namespace kiln::codegen
