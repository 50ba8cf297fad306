// kiln's float exp, tanh and erf.
#include "codegen/float_math.h"

#include "codegen/llvm_calls.h"
#include "codegen/scale_by_power_of_two.h"

namespace kiln::codegen {

using llvm::Value;

// a * b + c for polynomial evaluation inside kiln's own math functions
// (never for eager's ops): one instruction where the CPU has FMA.
Value* FloatMath::muladd(Value* a, Value* b, Value* c) {
  return call_intrinsic(b_, llvm::Intrinsic::fmuladd, {a, b, c});
}

Value* FloatMath::exp(Value* x) {
  return x->getType()->isFloatTy() ? exp_f32(x) : call_intrinsic(b_, llvm::Intrinsic::exp, {x});
}

// Eigen's rational tanh (generic_fast_tanh_float), as x * (p / q): the
// ratio is near 1 for tiny x, so tiny and subnormal x need no special
// case (Eigen's (x p) / q does). Within 5 ulp. x is clamped to
// +-kTanhSaturation, the smallest float at which this rational (as
// evaluated here, with FMAs) is exactly 1: beyond it tanh is +-1 exactly,
// as in libm, for two min/max instead of a compare, a copysign and a
// select. A NaN x stays NaN (the clamps pass it).
//
// The division is IEEE's, not the CPU's reciprocal estimate refined by
// Newton-Raphson: the estimate is 14-bit in an AVX-512 vector loop and
// 12-bit in its scalar remainder, so an element's bits depended on whether
// it fell in a remainder, and so on how a flush cut the trace into kernels
// (docs/codegen.md, "Division in tanh").
static constexpr double kTanhSaturation = 7.932197093963623;  // a float: 0x1.fba91ep+2

Value* FloatMath::tanh(Value* x) {
  llvm::Type* ty = x->getType();
  auto k = [&](double v) { return fconst(ty, v); };
  x = b_.CreateSelect(b_.CreateFCmpOGT(x, k(kTanhSaturation)), k(kTanhSaturation), x);
  x = b_.CreateSelect(b_.CreateFCmpOLT(x, k(-kTanhSaturation)), k(-kTanhSaturation), x);
  Value* x2 = b_.CreateFMul(x, x);
  Value* p = k(-2.76076847742355e-16);
  for (double a : {2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08, 1.48572235717979e-05,
                   6.37261928875436e-04, 4.89352455891786e-03}) {
    p = muladd(x2, p, k(a));
  }
  Value* q = k(1.19825839466702e-06);
  for (double c : {1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03}) {
    q = muladd(x2, q, k(c));
  }
  return b_.CreateFMul(x, b_.CreateFDiv(p, q));
}

// expf as Cephes reduces it: n = round(x / ln2), r = x - n ln2 in two
// parts, e^r by a degree-6 polynomial in Horner form (a minimax fit kiln
// made for this range; 0.9 ulp), times 2^n. About 1 ulp over the whole
// range; AVX-512 wide. n is rounded by adding 1.5 * 2^23 inside the FMA.
// With AVX-512, one vscalefps multiplies by 2^n (docs/codegen.md,
// "Scaling by 2^n in exp").
Value* FloatMath::exp_f32(Value* x) {
  llvm::Type* ty = x->getType();
  auto k = [&](double v) { return fconst(ty, v); };
  Value* xc = b_.CreateSelect(b_.CreateFCmpOGT(x, k(89.0)), k(89.0), x);
  xc = b_.CreateSelect(b_.CreateFCmpOLT(xc, k(-104.0)), k(-104.0), xc);  // NaN passes through
  const double magic = vscalef_ ? kRoundMagic : kRoundMagic + 254;
  Value* t = call_intrinsic(b_, llvm::Intrinsic::fma, {xc, k(1.44269504088896341), k(magic)});
  Value* n = b_.CreateFSub(t, k(magic));
  Value* r = muladd(n, k(2.12194440e-4), muladd(n, k(-0.693359375), xc));
  Value* p = k(0.0013836841098964214);
  for (double c : {0.008374824188649654, 0.04166822507977486, 0.16666419804096222, 0.49999991059303284, 1.0, 1.0}) {
    p = muladd(p, r, k(c));
  }
  return vscalef_ ? emit_scale_by_power_of_two(b_, p, n) : scale_in_two_halves(p, t);
}

// p * 2^n for the portable exp, n in the bits of t as exp_f32 rounds it
// there (t = B + n + 254, B = 0x4B400000), in two halves so that
// subnormal and overflowing results come out right: halved, the bits are
// B/2 + n1 + 127 (n1 = floor(n/2)); the rest, B/2 + n2 + 127 (n2 = n -
// n1): each a biased exponent once shifted into the exponent field, where
// B/2 (low 20 bits zero) leaves the word. No round, convert or add.
Value* FloatMath::scale_in_two_halves(Value* p, Value* t) {
  llvm::Type* ty = p->getType();
  llvm::Type* i32 = b_.getInt32Ty();
  Value* bits = b_.CreateBitCast(t, i32);
  Value* half = b_.CreateLShr(bits, 1);
  Value* scale1 = b_.CreateBitCast(b_.CreateShl(half, 23), ty);
  Value* scale2 = b_.CreateBitCast(b_.CreateShl(b_.CreateSub(bits, half), 23), ty);
  return b_.CreateFMul(b_.CreateFMul(p, scale1), scale2);
}

// Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), as at::vec's erf,
// for |x| >= 0.5.
Value* FloatMath::erf(Value* x) {
  llvm::Type* ty = x->getType();
  auto k = [&](double v) { return fconst(ty, v); };
  Value* ax = call_intrinsic(b_, llvm::Intrinsic::fabs, {x});
  Value* t = b_.CreateFDiv(k(1), muladd(k(0.3275911), ax, k(1)));
  Value* r = k(1.061405429);
  for (double c : {-1.453152027, 1.421413741, -0.284496736, 0.254829592}) r = muladd(r, t, k(c));
  Value* e = exp(b_.CreateFNeg(b_.CreateFMul(x, x)));
  Value* y =
      call_intrinsic(b_, llvm::Intrinsic::copysign, {b_.CreateFSub(k(1), b_.CreateFMul(b_.CreateFMul(e, t), r)), x});
  // Near 0 that form loses relative accuracy (1 - r t e cancels): the
  // Taylor series, exact to 1e-9 relative for |x| < 0.5.
  Value* z = b_.CreateFMul(x, x);
  Value* s = k(1.0 / 9360);
  for (double c : {-1.0 / 1320, 1.0 / 216, -1.0 / 42, 1.0 / 10, -1.0 / 3, 1.0}) s = muladd(s, z, k(c));
  Value* series = b_.CreateFMul(b_.CreateFMul(x, k(1.12837916709551257390)), s);
  return b_.CreateSelect(b_.CreateFCmpOLT(ax, k(0.5)), series, y);
}

}  // namespace kiln::codegen
