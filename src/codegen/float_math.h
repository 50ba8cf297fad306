// kiln's own float32 math: exp, sin/cos, tanh and erf as straight-line FMA
// chains, so that loops using them vectorize on any CPU (and run faster
// than with libmvec's AVX-512 variants: docs/codegen.md, "kiln's own float
// math"). Double math and the other functions call intrinsics or libm.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <bit>
#include <cstdint>
#include <initializer_list>

namespace kiln::codegen {

class FloatMath {
 public:
  // `vscalef`: exp may scale with AVX-512's vscalefps (scale_by_power_of_two.h).
  FloatMath(llvm::IRBuilderBase& b, bool vscalef) : b_(b), vscalef_(vscalef) {}

  // e^x for float or double x (exp, sigmoid and erf need it): kiln's own
  // for float, where LLVM expands a vector llvm.exp.f32 into an expf call
  // per lane.
  llvm::Value* exp(llvm::Value* x);
  llvm::Value* tanh(llvm::Value* x);  // float x only, as erf, sin and cos
  llvm::Value* erf(llvm::Value* x);
  llvm::Value* sin(llvm::Value* x);
  llvm::Value* cos(llvm::Value* x);

  // How sin and cos reduce their argument (float_sin_cos.cpp):
  //  Double: in double, accurate up to |x| 2^50.
  //  FloatTracked: in float, accurate up to kSmallSinLimit, keeping the
  //    largest |x| in a slot (track_largest) so that the caller can rerun
  //    the loop exactly when an argument passed the limit.
  //  Exact: in double, with libm's sin/cos for larger finite x (the rerun).
  enum class SinCos { Double, FloatTracked, Exact };
  void set_sin_cos(SinCos reduction, llvm::Value* largest_slot = nullptr) {
    sin_cos_ = reduction;
    largest_slot_ = largest_slot;
  }
  // Keeps in `slot` (an i32) the largest |x| seen, as float bits: an
  // unsigned maximum, since a magnitude's bits compare as the magnitude does.
  void track_largest(llvm::Value* x, llvm::Value* slot);
  // Whether `largest` (what track_largest kept) is beyond the float reduction.
  llvm::Value* beyond_float_sin_cos(llvm::Value* largest);

 private:
  llvm::Value* muladd(llvm::Value* a, llvm::Value* b, llvm::Value* c);
  llvm::Value* exp_f32(llvm::Value* x);
  llvm::Value* scale_in_two_halves(llvm::Value* p, llvm::Value* t);
  llvm::Value* sin_or_cos(llvm::Value* x, bool cosine);
  llvm::Value* sin_or_cos_in_float(llvm::Value* x, bool cosine);
  llvm::Value* subtract_half_pis(llvm::Value* x, llvm::Value* n, bool cosine,
                                 std::initializer_list<double> half_pi_parts);
  llvm::Value* sin_reduced(llvm::Value* r, llvm::Value* n);

  // Adding 1.5 * 2^23 to a float of magnitude below 2^22 rounds it to an
  // integer (to nearest even) that lands in the low mantissa bits.
  static constexpr double kRoundMagic = 12582912.0;
  static constexpr double kInvPi = 0.318309886183790671538;
  static constexpr double kSmallSinLimit = 65536;  // float-only sin/cos reduction up to here
  static constexpr uint32_t kSmallSinLimitBits = std::bit_cast<uint32_t>(static_cast<float>(kSmallSinLimit));
  static constexpr double kHugeSinLimit = 1125899906842624.0;  // 2^50: the double reduction up to here

  llvm::IRBuilderBase& b_;
  const bool vscalef_;
  SinCos sin_cos_ = SinCos::Double;
  llvm::Value* largest_slot_ = nullptr;  // with SinCos::FloatTracked
};

}  // namespace kiln::codegen
