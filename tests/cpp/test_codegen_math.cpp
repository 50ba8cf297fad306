// Codegen: kiln's own float math and libm calls: accuracy, edge cases, sin/cos reduction and vectorization.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiled_kernel.h"
#include "kernel_builder.h"
#include "kiln/codegen.h"

using namespace kiln;
using ir::DType;
using ir::Op;
using test::Compiled;

TEST(Codegen, MathFunctionsMatchLibm) {
  const DType f = DType::Float32;
  for (Op op : {Op::Exp, Op::Log, Op::Sin, Op::Cos, Op::Tanh, Op::Erf, Op::Sigmoid, Op::Expm1}) {
    test::KernelBuilder b(1);
    int x = b.access(f, ir::Inner::Contiguous);
    int out = b.access(f, ir::Inner::Contiguous);
    int lx = b.load(x);
    b.store(out, b.node(op, f, op == Op::Log ? b.node(Op::Abs, f, lx) : lx));
    Compiled run(b.k);
    const int n = 1000;
    std::vector<float> xs(n), outs(n);
    for (int i = 0; i < n; ++i) xs[i] = (i % 2 ? -1.f : 1.f) * (i < 100 ? 1e-4f * i + 1e-6f : 0.0197f * i);
    run({xs.data(), outs.data()}, test::dense_ints(b.k, {n}), {}, 0, n);
    for (int i = 0; i < n; ++i) {
      double v = xs[i], want = 0;
      switch (op) {
        case Op::Exp: want = std::exp(v); break;
        case Op::Log: want = std::log(std::fabs(v)); break;
        case Op::Sin: want = std::sin(v); break;
        case Op::Cos: want = std::cos(v); break;
        case Op::Tanh: want = std::tanh(v); break;
        case Op::Erf: want = std::erf(v); break;
        case Op::Sigmoid: want = 1 / (1 + std::exp(-v)); break;
        default: want = std::expm1(v); break;
      }
      const double tol = 4e-7 * std::fabs(want) + 1e-30;
      ASSERT_NEAR(outs[i], want, tol) << ir::op_name(op) << " at " << v;
    }
  }
}

TEST(Codegen, OwnMathFunctionsHandleTheEdges) {
  // exp: overflow, underflow to subnormals and zero; sin/cos/tanh: infinities,
  // NaN, subnormals; tanh on both sides of where it saturates, and huge x.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs = {-200.f, -103.5f, -100.f, -87.5f, 0.f,     88.5f, 88.8f, 200.f, inf,   -inf,  nan,
                           1e6f,   -3e7f,   1e-30f, 1e-40f, -1e-40f, 7.9f,  -7.9f, 9.5f,  3e14f, -3e14f};
  for (Op op : {Op::Exp, Op::Sin, Op::Cos, Op::Tanh}) {
    test::KernelBuilder b(1);
    int x = b.access(DType::Float32, ir::Inner::Contiguous);
    int out = b.access(DType::Float32, ir::Inner::Contiguous);
    b.store(out, b.node(op, DType::Float32, b.load(x)));
    Compiled run(b.k);
    std::vector<float> outs(xs.size());
    run({xs.data(), outs.data()}, test::dense_ints(b.k, {int64_t(xs.size())}), {}, 0, int64_t(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) {
      float want = op == Op::Exp   ? std::exp(xs[i])
                   : op == Op::Sin ? std::sin(xs[i])
                   : op == Op::Cos ? std::cos(xs[i])
                                   : std::tanh(xs[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(outs[i])) << ir::op_name(op) << " at " << xs[i];
      } else if (std::isinf(want)) {
        EXPECT_EQ(outs[i], want) << ir::op_name(op) << " at " << xs[i];
      } else {
        EXPECT_NEAR(outs[i], want, 2e-7 * std::fabs(want) + 1e-44) << ir::op_name(op) << " at " << xs[i];
      }
    }
  }
}

namespace {

// `op` of float32 `xs` through one kernel; `in_place` stores into the input's buffer.
std::vector<float> run_unary(Op op, std::vector<float> xs, bool in_place = false, codegen::Options options = {}) {
  test::KernelBuilder b(1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = in_place ? x : b.access(DType::Float32, ir::Inner::Contiguous);
  b.store(out, b.node(op, DType::Float32, b.load(x)));
  Compiled run(b.k, options);
  std::vector<float> outs(xs.size());
  const int64_t n = static_cast<int64_t>(xs.size());
  run(in_place ? std::vector<void*>{xs.data()} : std::vector<void*>{xs.data(), outs.data()}, test::dense_ints(b.k, {n}),
      {}, 0, n);
  return in_place ? xs : outs;
}

void expect_libm_sincos(Op op, const std::vector<float>& xs, const std::vector<float>& got, const char* what) {
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = op == Op::Sin ? std::sin(double(xs[i])) : std::cos(double(xs[i]));
    ASSERT_NEAR(got[i], want, 2.5e-7 * std::fabs(want) + 1e-12) << what << ": " << ir::op_name(op) << " at " << xs[i];
  }
}

}  // namespace

// Arguments up to 65536 take the float-only reduction: it must be as
// accurate as the double one, including next to multiples of pi/2 where sin
// or cos nearly cancels, and at the limit.
TEST(Codegen, FloatSinCosReductionIsAccurateUpToItsLimit) {
  std::vector<float> xs;
  for (int k = -41721; k <= 41721; k += 13) {
    const float near = static_cast<float>(k * 1.57079632679489661923);
    xs.push_back(near);
    xs.push_back(std::nextafter(near, 1e9f));
    xs.push_back(std::nextafter(near, -1e9f));
  }
  for (int i = 0; i <= 20000; ++i) xs.push_back(-65536.f + 6.5536f * i);
  for (Op op : {Op::Sin, Op::Cos}) expect_libm_sincos(op, xs, run_unary(op, xs, false), "small arguments");
}

// One argument beyond the limit (or an infinity) sends the whole run to the
// double path; an in-place kernel cannot run twice and takes it directly.
TEST(Codegen, SinCosBeyondTheFloatLimitFallsBackExactly) {
  std::vector<float> xs;
  for (int i = 0; i < 300; ++i) xs.push_back(0.37f * i - 50.f);
  for (int j = 0; j < 12; ++j)
    xs[20 * j + 7] = (j % 2 ? -1.f : 1.f) * (65537.f + 99991.f * j * j * j);  // every quadrant
  for (Op op : {Op::Sin, Op::Cos}) {
    expect_libm_sincos(op, xs, run_unary(op, xs, false), "rerun");
    expect_libm_sincos(op, xs, run_unary(op, xs, true), "in place");
  }
  std::vector<float> with_inf = {0.5f, std::numeric_limits<float>::infinity(), 2.f};
  std::vector<float> got = run_unary(Op::Sin, with_inf, false);
  EXPECT_TRUE(std::isnan(got[1]));
  EXPECT_NEAR(got[0], std::sin(0.5), 1e-7);
  EXPECT_NEAR(got[2], std::sin(2.0), 1e-7);
}

// Past 2^50, where a double no longer holds x / pi's integer part, the
// rerun's scalar loop branches to libm's double sin/cos, up to the largest
// float. (In-place kernels, which cannot rerun, reduce in double only:
// accurate below 2^50.)
TEST(Codegen, SinCosOfHugeFloatsReduceExactly) {
  std::vector<float> xs = {
      0x1p50f, -0x1p50f, 0x1.000002p50f, 3e30f, -3e30f, 1e20f, 3.4e38f, -3.4e38f, std::ldexp(16367173.f, 72),
      0.5f};  // the last but one nears a multiple of pi
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(50, 127.99);
  for (int i = 0; i < 3000; ++i) xs.push_back(static_cast<float>((i % 2 ? -1 : 1) * std::exp2(exponent(rng))));
  for (Op op : {Op::Sin, Op::Cos}) expect_libm_sincos(op, xs, run_unary(op, xs, false), "huge arguments");
}

namespace {

// The error of `got` in units in the last place of the float nearest `want`.
double ulps(float got, double want) {
  const float nearest = static_cast<float>(want);
  const double ulp = std::nextafter(std::fabs(nearest), std::numeric_limits<float>::infinity()) - std::fabs(nearest);
  return std::fabs(double(got) - want) / ulp;
}

}  // namespace

// The accuracy docs/fusion.md states for kiln's own float32 math, checked
// against double libm on random arguments (glibc's float functions stay
// within 2.1 ulp on the same points; OpInfo's float32 rtol is about 10 ulp).
TEST(Codegen, OwnMathFunctionsStayWithinTheirStatedUlps) {
  struct Bound {
    Op op;
    float lo, hi;
    double max_ulps;
  };
  for (Bound bound : {Bound{Op::Sin, -65536, 65536, 2}, Bound{Op::Cos, -65536, 65536, 2}, Bound{Op::Sin, -4, 4, 2},
                      Bound{Op::Cos, -4, 4, 2}, Bound{Op::Exp, -87, 88.5, 1.5}, Bound{Op::Tanh, -8, 8, 5},
                      Bound{Op::Tanh, -0.01f, 0.01f, 5}}) {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(bound.lo, bound.hi);
    std::vector<float> xs(200000);
    for (float& x : xs) x = dist(gen);
    const std::vector<float> outs = run_unary(bound.op, xs);
    double worst = 0;
    float worst_at = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double v = xs[i];
      const double want = bound.op == Op::Sin   ? std::sin(v)
                          : bound.op == Op::Cos ? std::cos(v)
                          : bound.op == Op::Exp ? std::exp(v)
                                                : std::tanh(v);
      const double e = ulps(outs[i], want);
      if (e > worst) worst = e, worst_at = xs[i];
    }
    EXPECT_LE(worst, bound.max_ulps) << ir::op_name(bound.op) << " on [" << bound.lo << ", " << bound.hi << "] at "
                                     << worst_at;
  }
}

// tanh is exactly +-1 wherever it saturates, never beyond, and within its
// 5 ulp up to there, on every float from 7.8 to 9.5 (libm's float tanh is 1
// from 9.01 on): in the vector body, and in the scalar loop (runs of 5).
TEST(Codegen, TanhIsExactlyOneWhereItSaturates) {
  std::vector<float> xs;
  for (float x = 7.8f; x < 9.5f; x = std::nextafter(x, 10.f)) xs.push_back(x);
  const size_t half = xs.size();
  for (size_t i = 0; i < half; ++i) xs.push_back(-xs[i]);
  std::vector<float> scalar(xs.size());
  {
    test::KernelBuilder b(1);
    int x = b.access(DType::Float32, ir::Inner::Contiguous);
    int out = b.access(DType::Float32, ir::Inner::Contiguous);
    b.store(out, b.node(Op::Tanh, DType::Float32, b.load(x)));
    Compiled run(b.k);
    const int64_t n = static_cast<int64_t>(xs.size());
    for (int64_t at = 0; at < n; at += 5)
      run({xs.data(), scalar.data()}, test::dense_ints(b.k, {n}), {}, at, std::min(n, at + 5));
  }
  const std::vector<float> vector = run_unary(Op::Tanh, xs);
  bool saturated = false;
  int ones = 0;
  for (size_t i = 0; i < half; ++i) {
    for (const std::vector<float>* outs : {&vector, static_cast<const std::vector<float>*>(&scalar)}) {
      const float y = (*outs)[i];
      ASSERT_LE(y, 1.f) << "tanh(" << xs[i] << ")";
      ASSERT_EQ((*outs)[half + i], -y) << "tanh(" << xs[half + i] << ")";
      ASSERT_LE(ulps(y, std::tanh(double(xs[i]))), 5.0) << "tanh(" << xs[i] << ")";
    }
    if (saturated) ASSERT_EQ(vector[i], 1.f) << "tanh(" << xs[i] << ") after tanh was 1 below it";
    saturated = saturated || vector[i] == 1.f;
    ones += vector[i] == 1.f;
  }
  EXPECT_GT(ones, 1000);  // it does saturate, well before 9.5
}

// With AVX-512, exp scales by 2^n with vscalefps, vectorized through kiln's
// own call (llvm.ldexp does not vectorize); the portable path multiplies by
// two halves of 2^n. Both round once: bit-identical results, subnormal and
// overflowing ones included, for exp and for sigmoid and erf, which use it.
TEST(Codegen, Avx512ExpScalingMatchesThePortableOneBitForBit) {
  codegen::Options portable;
  portable.avx512_math = false;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-110, 95);
  std::vector<float> xs(4099);
  for (float& x : xs) x = dist(gen);
  const float inf = std::numeric_limits<float>::infinity();
  for (float edge : {-inf, inf, std::numeric_limits<float>::quiet_NaN(), -103.9f, -87.4f, 88.72f, 88.73f, 0.f, -0.f}) {
    xs.push_back(edge);
  }
  for (Op op : {Op::Exp, Op::Sigmoid, Op::Erf}) {
    const std::vector<float> fast = run_unary(op, xs), slow = run_unary(op, xs, false, portable);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (std::isnan(slow[i])) {
        EXPECT_TRUE(std::isnan(fast[i])) << ir::op_name(op) << "(" << xs[i] << ")";
      } else {
        EXPECT_EQ(fast[i], slow[i]) << ir::op_name(op) << "(" << xs[i] << ")";
      }
    }
  }
  test::KernelBuilder b(1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = b.access(DType::Float32, ir::Inner::Contiguous);
  b.store(out, b.node(Op::Exp, DType::Float32, b.load(x)));
  const std::string fast_ir = codegen::compile(b.k, "kiln_exp", {}, true).llvm_ir;
  const std::string slow_ir = codegen::compile(b.k, "kiln_exp", portable, true).llvm_ir;
  EXPECT_EQ(slow_ir.find("scalef"), std::string::npos) << slow_ir;
  EXPECT_EQ(fast_ir.find("kiln_scalef"), std::string::npos) << "a call was left for the linker:\n" << fast_ir;
  if (codegen::environment_fingerprint({}).find("+avx512vl,") != std::string::npos) {
    EXPECT_NE(fast_ir.find("llvm.x86.avx512.mask.scalef.ps.512"), std::string::npos) << fast_ir;  // the vector body
    EXPECT_NE(fast_ir.find("llvm.x86.avx512.mask.scalef.ss"), std::string::npos) << fast_ir;      // the remainder
  }
  EXPECT_NE(codegen::environment_fingerprint({}), codegen::environment_fingerprint(portable));
}

// sigmoid and erf use kiln's own exp: LLVM would expand a vector llvm.exp
// into one scalar expf call per lane.
TEST(Codegen, SigmoidAndErfComputeExpInline) {
  for (Op op : {Op::Sigmoid, Op::Erf}) {
    test::KernelBuilder b(1);
    int x = b.access(DType::Float32, ir::Inner::Contiguous);
    int out = b.access(DType::Float32, ir::Inner::Contiguous);
    b.store(out, b.node(op, DType::Float32, b.load(x)));
    auto obj = codegen::compile(b.k, "kiln_exp_user", {}, /*want_ir=*/true);
    EXPECT_EQ(obj.llvm_ir.find("expf"), std::string::npos) << ir::op_name(op);
    EXPECT_EQ(obj.llvm_ir.find("llvm.exp."), std::string::npos) << ir::op_name(op);
    EXPECT_NE(obj.llvm_ir.find("<16 x float>"), std::string::npos) << ir::op_name(op) << ": not vectorized";
  }
}

// Element loops with two or more of kiln's math functions per element keep
// 8 vectors in flight; lighter loops are left to LLVM's choice.
TEST(Codegen, DeepMathLoopsInterleaveEightVectors) {
  auto ir_of = [](std::initializer_list<Op> ops) {
    test::KernelBuilder b(1);
    int x = b.access(DType::Float32, ir::Inner::Contiguous);
    int out = b.access(DType::Float32, ir::Inner::Contiguous);
    int v = b.load(x);
    for (Op op : ops) v = b.node(op, DType::Float32, v);
    b.store(out, v);
    return codegen::compile(b.k, "kiln_deep", {}, /*want_ir=*/true).llvm_ir;
  };
  const std::string deep = ir_of({Op::Exp, Op::Tanh}), light = ir_of({Op::Exp, Op::Neg});
  // The hint itself is consumed by the vectorizer: count the vector loads of x.
  auto vector_loads = [](const std::string& ir) {
    int n = 0;
    for (size_t at = ir.find("load <16 x float>"); at != std::string::npos; at = ir.find("load <16 x float>", at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(vector_loads(deep), 8);
  EXPECT_LT(vector_loads(light), 8);
}

// kiln's own float math gives an argument the same bits in a loop's vector
// body and in its scalar remainder: which elements fall in a remainder
// depends on how a flush cut the trace into kernels, and results must not.
// (tanh's division by a reciprocal estimate, 14-bit in the body and 12-bit
// in the remainder, differed by 1 ulp.)
TEST(Codegen, MathAgreesBitForBitBetweenVectorBodyAndRemainder) {
  std::vector<float> xs(128 * 8 + 15);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = -7.5f + 15.f * static_cast<float>(i % 128) / 127.f;
  for (Op op : {Op::Tanh, Op::Exp, Op::Sin, Op::Cos, Op::Erf}) {
    const std::vector<float> outs = run_unary(op, xs);
    for (size_t j = 0; j < 15; ++j) {
      const size_t tail = 128 * 8 + j;
      ASSERT_EQ(xs[tail], xs[j]);
      EXPECT_EQ(std::bit_cast<uint32_t>(outs[tail]), std::bit_cast<uint32_t>(outs[j]))
          << ir::op_name(op) << "(" << xs[j] << "): " << outs[j] << " in the body, " << outs[tail]
          << " in the remainder";
    }
  }
}

// Calls to libm in vector loops go to glibc's AVX-512 libmvec variants where
// the CPU and libmvec have them (LLVM's own table stops at 8 floats, and a
// 16-float loop would call scalar logf per lane).
TEST(Codegen, LibmCallsUseTheAvx512VectorVariants) {
  if (codegen::environment_fingerprint({}).find("libmvec=0") != std::string::npos) {
    GTEST_SKIP() << "no AVX-512 or no libmvec here";
  }
  for (auto [dtype, variant] :
       {std::pair{DType::Float32, "_ZGVeN16v_logf"}, std::pair{DType::Float64, "_ZGVeN8v_log"}}) {
    test::KernelBuilder b(1);
    int x = b.access(dtype, ir::Inner::Contiguous);
    int out = b.access(dtype, ir::Inner::Contiguous);
    b.store(out, b.node(Op::Log, dtype, b.load(x)));
    auto obj = codegen::compile(b.k, "kiln_log", {}, /*want_ir=*/true);
    EXPECT_NE(obj.llvm_ir.find(variant), std::string::npos) << variant;
    Compiled run(b.k);
    const int n = 100;
    std::vector<double> xs(n), outs(n);
    std::vector<float> xf(n), of(n);
    for (int i = 0; i < n; ++i) xs[i] = xf[i] = 0.37f * (i + 1);
    if (dtype == DType::Float32) {
      run({xf.data(), of.data()}, test::dense_ints(b.k, {n}), {}, 0, n);
      for (int i = 0; i < n; ++i)
        EXPECT_NEAR(of[i], std::log(double(xf[i])), 4e-7 * std::fabs(std::log(double(xf[i]))) + 1e-7);
    } else {
      run({xs.data(), outs.data()}, test::dense_ints(b.k, {n}), {}, 0, n);
      for (int i = 0; i < n; ++i) EXPECT_NEAR(outs[i], std::log(xs[i]), 1e-15 * std::fabs(std::log(xs[i])) + 1e-16);
    }
  }
}
