// Codegen: hand-built Kernel IR compiled by LLVM and run on host arrays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernel_builder.h"
#include "kiln/codegen.h"

using namespace kiln;
using ir::DType;
using ir::Op;

namespace {

struct Compiled {
  std::unique_ptr<codegen::LoadedKernel> loaded;
  explicit Compiled(const ir::Kernel& k, codegen::Options o = {}) {
    auto obj = codegen::compile(k, "kiln_test_kernel", o);
    EXPECT_GT(obj.object.size(), 0u);
    loaded = codegen::load(obj.object, "kiln_test_kernel");
  }
  void operator()(std::vector<void*> bufs, const std::vector<int64_t>& ints, const std::vector<double>& scalars,
                  int64_t begin, int64_t end) {
    loaded->fn(bufs.data(), ints.data(), scalars.data(), begin, end);
  }
};

uint16_t bf16_bits(float f) {  // c10::BFloat16's round to nearest even
  if (std::isnan(f)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

}  // namespace

TEST(Codegen, BroadcastMulAddWithRuntimeScalar) {
  // out[i, j] = x[i, j] * y[j] + s: a [3, 5] space, y broadcast along dim 0.
  test::KernelBuilder b(2);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int y = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = b.access(DType::Float32, ir::Inner::Contiguous);
  int s = b.scalar(DType::Float32);
  b.store(out, b.node(Op::Add, DType::Float32, b.node(Op::Mul, DType::Float32, b.load(x), b.load(y)), s));
  Compiled run(b.k);
  std::vector<float> xs(15), ys(5), outs(15, 0);
  for (int i = 0; i < 15; ++i) xs[i] = 0.1f * i - 0.7f;
  for (int j = 0; j < 5; ++j) ys[j] = 1.5f + j;
  const std::vector<int64_t> ints = test::launch_ints(b.k, {3, 5}, {{0, {5, 1}}, /*y*/ {0, {0, 1}}, {0, {5, 1}}});
  for (double scalar : {0.25, -3.0}) {  // a new scalar value runs the same code
    run({xs.data(), ys.data(), outs.data()}, ints, {scalar}, 0, 15);
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 5; ++j) {
        volatile float prod = xs[i * 5 + j] * ys[j];  // no contraction into an FMA
        EXPECT_EQ(outs[i * 5 + j], prod + static_cast<float>(scalar)) << i << "," << j;
      }
    }
  }
}

TEST(Codegen, StridedReadAndSplitRangesMatchOneRange) {
  // out = transpose(x) + 1 over a [4, 6] space, x stored [6, 4].
  test::KernelBuilder b(2);
  int x = b.access(DType::Float64, ir::Inner::Strided);
  int out = b.access(DType::Float64, ir::Inner::Contiguous);
  b.store(out, b.node(Op::Add, DType::Float64, b.load(x), b.constant(DType::Float64, 1)));
  Compiled run(b.k);
  std::vector<double> xs(24), whole(24), split(24);
  for (int i = 0; i < 24; ++i) xs[i] = i * 0.5;
  const std::vector<int64_t> ints = test::launch_ints(b.k, {4, 6}, {{0, {1, 4}}, {0, {6, 1}}});
  run({xs.data(), whole.data()}, ints, {}, 0, 24);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) EXPECT_EQ(whole[i * 6 + j], xs[j * 4 + i] + 1);
  }
  // Thread splits land mid-row.
  run({xs.data(), split.data()}, ints, {}, 0, 7);
  run({xs.data(), split.data()}, ints, {}, 7, 17);
  run({xs.data(), split.data()}, ints, {}, 17, 24);
  EXPECT_EQ(whole, split);
}

TEST(Codegen, SoftmaxIsOneRowKernel) {
  // rows of 7: m = max(x); s = sum(exp(x - m)); out = exp(x - m) / s
  const DType f = DType::Float32;
  test::KernelBuilder b(2, 1);
  int x = b.access(f, ir::Inner::Contiguous);
  int out = b.access(f, ir::Inner::Contiguous);
  int lx = b.load(x);
  int m = b.reduce(ir::ReduceKind::Max, f, lx);
  int e = b.node(Op::Exp, f, b.node(Op::Sub, f, lx, m));
  int s = b.reduce(ir::ReduceKind::Sum, f, e);
  b.store(out, b.node(Op::Div, f, e, s));
  Compiled run(b.k);
  const int rows = 5, n = 7;
  std::vector<float> xs(rows * n), outs(rows * n);
  for (int i = 0; i < rows * n; ++i) xs[i] = std::sin(i * 1.3f) * 4;
  run({xs.data(), outs.data()}, test::dense_ints(b.k, {rows, n}), {}, 0, rows);
  for (int r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; ++j) mx = std::max(mx, double(xs[r * n + j]));
    for (int j = 0; j < n; ++j) sum += std::exp(xs[r * n + j] - mx);
    for (int j = 0; j < n; ++j) EXPECT_NEAR(outs[r * n + j], std::exp(xs[r * n + j] - mx) / sum, 1e-6);
  }
}

TEST(Codegen, RowLevelStoreOfAMean) {
  // mean over dim 1 of a [3, 4] space, stored per row with keepdim.
  test::KernelBuilder b(2, 1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = b.access(DType::Float32, ir::Inner::Broadcast, /*row_invariant=*/true);
  int sum = b.reduce(ir::ReduceKind::Sum, DType::Float64, b.node(Op::Cast, DType::Float64, b.load(x)));
  int n = b.node(Op::Cast, DType::Float64, b.scalar(DType::Int64));
  b.store(out, b.node(Op::Cast, DType::Float32, b.node(Op::Div, DType::Float64, sum, n)));
  Compiled run(b.k);
  std::vector<float> xs = {1, 2, 3, 4, 10, 20, 30, 40, -1, -1, -1, -5}, outs(3);
  run({xs.data(), outs.data()}, test::launch_ints(b.k, {3, 4}, {{0, {4, 1}}, {0, {1, 0}}}, {4}), {}, 0, 3);
  EXPECT_EQ(outs, (std::vector<float>{2.5f, 25.f, -2.f}));
}

TEST(Codegen, ArgMaxTakesTheFirstMaximumAndTheFirstNaN) {
  test::KernelBuilder b(2, 1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = b.access(DType::Int64, ir::Inner::Broadcast, true);
  b.store(out, b.reduce(ir::ReduceKind::ArgMax, DType::Int64, b.load(x)));
  Compiled run(b.k);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs = {1, 5, 5, 2, /**/ 1, nan, 9, nan, /**/ -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  std::vector<int64_t> outs(3, -1);
  run({xs.data(), outs.data()}, test::launch_ints(b.k, {3, 4}, {{0, {4, 1}}, {0, {1, 0}}}), {}, 0, 3);
  EXPECT_EQ(outs, (std::vector<int64_t>{1, 1, 0}));
}

TEST(Codegen, BFloat16RoundsEveryResultToNearestEven) {
  test::KernelBuilder b(1);
  int x = b.access(DType::BFloat16, ir::Inner::Contiguous);
  int y = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = b.access(DType::BFloat16, ir::Inner::Contiguous);
  int sum = b.node(Op::Add, DType::Float32, b.node(Op::Cast, DType::Float32, b.load(x)), b.load(y));
  b.store(out, b.node(Op::Cast, DType::BFloat16, sum));
  Compiled run(b.k);
  std::vector<float> ys = {1.0f / 256, 3.0f / 256, 1e-3f, std::numeric_limits<float>::quiet_NaN(), 1e38f * 4};
  std::vector<uint16_t> xs(ys.size(), bf16_bits(1.0f)), outs(ys.size());
  run({xs.data(), ys.data(), outs.data()}, test::dense_ints(b.k, {5}), {}, 0, 5);
  for (size_t i = 0; i < ys.size(); ++i) EXPECT_EQ(outs[i], bf16_bits(1.0f + ys[i])) << i;
}

TEST(Codegen, IntegerAndBoolSemantics) {
  // out = (x > 3) ? -x : abs(x) over int8 (wraps), and a bool store
  test::KernelBuilder b(1);
  int x = b.access(DType::Int8, ir::Inner::Contiguous);
  int out = b.access(DType::Int8, ir::Inner::Contiguous);
  int flag = b.access(DType::Bool, ir::Inner::Contiguous);
  int lx = b.load(x);
  int gt = b.node(Op::Gt, DType::Bool, lx, b.constant(DType::Int8, 3));
  b.store(out, b.node(Op::Where, DType::Int8, gt, b.node(Op::Neg, DType::Int8, lx), b.node(Op::Abs, DType::Int8, lx)));
  b.store(flag, gt);
  Compiled run(b.k);
  std::vector<int8_t> xs = {-128, -5, 0, 3, 4, 127}, outs(6);
  std::vector<uint8_t> flags(6, 7);
  run({xs.data(), outs.data(), flags.data()}, test::dense_ints(b.k, {6}), {}, 0, 6);
  EXPECT_EQ(outs, (std::vector<int8_t>{-128, 5, 0, 3, -4, -127}));
  EXPECT_EQ(flags, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1}));
}

TEST(Codegen, FloatToIntCastsFollowStaticCast) {
  test::KernelBuilder b(1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int u8 = b.access(DType::UInt8, ir::Inner::Contiguous);
  int i32 = b.access(DType::Int32, ir::Inner::Contiguous);
  int lx = b.load(x);
  b.store(u8, b.node(Op::Cast, DType::UInt8, lx));
  b.store(i32, b.node(Op::Cast, DType::Int32, lx));
  Compiled run(b.k);
  std::vector<float> xs = {-1.5f, 2.7f, 255.9f, -300.2f};
  std::vector<uint8_t> us(4);
  std::vector<int32_t> is(4);
  run({xs.data(), us.data(), is.data()}, test::dense_ints(b.k, {4}), {}, 0, 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(us[i], static_cast<uint8_t>(static_cast<int64_t>(xs[i])));
    EXPECT_EQ(is[i], static_cast<int32_t>(xs[i]));
  }
}

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

TEST(Codegen, AnObjectLoadsAgainWithoutCompiling) {
  test::KernelBuilder b(1);
  int x = b.access(DType::Int32, ir::Inner::Contiguous);
  int out = b.access(DType::Int32, ir::Inner::Contiguous);
  b.store(out, b.node(Op::Mul, DType::Int32, b.load(x), b.load(x)));
  auto obj = codegen::compile(b.k, "kiln_square", {});
  auto first = codegen::load(obj.object, "kiln_square");
  auto second = codegen::load(obj.object, "kiln_square");  // same symbol, another dylib
  std::vector<int32_t> xs = {1, -2, 3}, a(3), c(3);
  const std::vector<int64_t> ints = test::dense_ints(b.k, {3});
  void* bufs1[] = {xs.data(), a.data()};
  void* bufs2[] = {xs.data(), c.data()};
  first->fn(bufs1, ints.data(), nullptr, 0, 3);
  first.reset();  // unloading one copy leaves the other working
  second->fn(bufs2, ints.data(), nullptr, 0, 3);
  EXPECT_EQ(a, (std::vector<int32_t>{1, 4, 9}));
  EXPECT_EQ(c, a);
}

TEST(Codegen, MalformedObjectIsAClearError) {
  try {
    codegen::load("not an object", "kiln_missing");
    FAIL() << "loaded garbage";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("kiln_missing"), std::string::npos) << e.what();
  }
}

TEST(Codegen, FingerprintNamesTheCompilerAndTheCpu) {
  std::string plain = codegen::environment_fingerprint({});
  std::string fast = codegen::environment_fingerprint({.fast_math = true});
  EXPECT_NE(plain.find("llvm=19"), std::string::npos) << plain;
  EXPECT_NE(plain.find("cpu="), std::string::npos) << plain;
  EXPECT_NE(plain, fast);
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

// A width hint on a loop LLVM cannot vectorize (erfcf has no vector variant)
// makes LLVM emit a remark; kiln drops it instead of printing to stderr.
TEST(Codegen, CompilingPrintsNothing) {
  test::KernelBuilder b(1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = b.access(DType::Float32, ir::Inner::Contiguous);
  b.store(out, b.node(Op::Erfc, DType::Float32, b.load(x)));
  testing::internal::CaptureStderr();
  Compiled run(b.k);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  std::vector<float> xs = {-1.f, 0.f, 0.5f, 3.f}, outs(4);
  run({xs.data(), outs.data()}, test::dense_ints(b.k, {4}), {}, 0, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(outs[i], std::erfc(xs[i]), 1e-6) << xs[i];
}

// Float sums over a row accumulate one partial sum per vector lane, as
// eager's CPU kernels do: a long float32 row stays far more accurate than a
// sequential float32 sum (which drifts by ~1e-4 relative here).
TEST(Codegen, RowSumsAccumulateInVectorLanes) {
  const int64_t n = 1 << 17;
  test::KernelBuilder b(2, 1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = b.access(DType::Float32, ir::Inner::Broadcast, /*row_invariant=*/true);
  b.store(out, b.reduce(ir::ReduceKind::Sum, DType::Float32, b.load(x)));
  Compiled run(b.k);
  std::vector<float> xs(n, 0.1f), outs(1);
  run({xs.data(), outs.data()}, test::launch_ints(b.k, {1, n}, {{0, {n, 1}}, {0, {1, 0}}}), {}, 0, 1);
  float sequential = 0;
  for (float v : xs) sequential += v;
  const double exact = double(0.1f) * n;
  EXPECT_GT(std::fabs(sequential - exact) / exact, 1e-4);  // what an in-order float loop gives
  EXPECT_LT(std::fabs(outs[0] - exact) / exact, 5e-5) << outs[0] << " vs " << exact;
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

// tanh divides by a reciprocal estimate: AVX-512's 14-bit one refined once in
// the vector body, the 12-bit scalar one refined twice in the remainder. The
// same argument gives the same result, within 1 ulp, wherever it falls.
TEST(Codegen, EstimatedDivisionAgreesBetweenVectorBodyAndRemainder) {
  std::vector<float> xs(128 * 8 + 15);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = -7.5f + 15.f * static_cast<float>(i % 128) / 127.f;
  const std::vector<float> outs = run_unary(Op::Tanh, xs);
  for (size_t j = 0; j < 15; ++j) {
    const size_t tail = 128 * 8 + j;
    ASSERT_EQ(xs[tail], xs[j]);
    EXPECT_LE(ulps(outs[tail], outs[j]), 1.0)
        << "tanh(" << xs[j] << "): " << outs[j] << " in the body, " << outs[tail] << " in the remainder";
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

namespace {

// y = x * 2 + 1 (float32) and m = x > 0 (bool) from a float32 x, rank 1 or 2.
ir::Kernel affine_and_sign(int rank, bool streaming) {
  test::KernelBuilder b(rank);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int y = b.access(DType::Float32, ir::Inner::Contiguous);
  int m = b.access(DType::Bool, ir::Inner::Contiguous);
  int v = b.load(x);
  b.store(y, b.node(Op::Add, DType::Float32, b.node(Op::Mul, DType::Float32, v, b.constant(DType::Float32, 2)),
                    b.constant(DType::Float32, 1)));
  b.store(m, b.node(Op::Gt, DType::Bool, v, b.constant(DType::Float32, 0)));
  b.k.streaming_stores = streaming;
  return b.k;
}

// 64-byte aligned host memory, as the device pool hands out.
template <typename T>
struct Aligned {
  T* data;
  size_t n;
  Aligned(size_t count, T fill)
      : data(static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64))), n(count) {
    std::fill(data, data + n, fill);
  }
  ~Aligned() { std::free(data); }
  bool operator==(const Aligned& o) const { return std::memcmp(data, o.data, n * sizeof(T)) == 0; }
};

}  // namespace

// Streaming kernels' vector stores are non-temporal; other kernels' are not.
TEST(Codegen, StreamingStoresAreNonTemporal) {
  const std::string streamed = codegen::compile(affine_and_sign(1, true), "kiln_nt", {}, true).llvm_ir;
  const std::string cached = codegen::compile(affine_and_sign(1, false), "kiln_t", {}, true).llvm_ir;
  EXPECT_NE(streamed.find("store <16 x float>"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("align 64, !alias.scope"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("!nontemporal"), std::string::npos) << streamed;
  EXPECT_EQ(cached.find("!nontemporal"), std::string::npos) << cached;
}

// Whatever the outputs' alignment (runs that start mid-line go through the
// tiles), the length or the split into pieces, a streaming kernel writes
// exactly what the cached one does, and nothing else.
TEST(Codegen, StreamingStoresMatchCachedStoresAtAnyAlignment) {
  const ir::Kernel streaming = affine_and_sign(1, true), caching = affine_and_sign(1, false);
  Compiled streamed(streaming), cached(caching);
  const int64_t most = 5000, slack = 80;  // more than a 4 KiB tile of floats
  Aligned<float> x(most, 0.f);
  for (int64_t i = 0; i < most; ++i) x.data[i] = static_cast<float>((i * 37) % 101 - 50) * 0.25f;
  for (int64_t y_off : {0, 1, 3, 15, 16, 17}) {
    for (int64_t m_off : {y_off, (y_off * 5 + 3) % 64}) {  // alike and differently misaligned
      for (int64_t n : {0, 1, 15, 16, 129, 1000, 5000}) {
        for (int64_t cut : {int64_t{0}, n / 3}) {
          Aligned<float> y_s(most + slack, -7.f), y_c(most + slack, -7.f);
          Aligned<uint8_t> m_s(most + slack, 9), m_c(most + slack, 9);
          const std::vector<int64_t> ints = test::launch_ints(caching, {n}, {{0, {1}}, {y_off, {1}}, {m_off, {1}}});
          for (auto [from, to] : {std::pair{int64_t{0}, cut}, std::pair{cut, n}}) {
            streamed({x.data, y_s.data, m_s.data}, ints, {}, from, to);
            cached({x.data, y_c.data, m_c.data}, ints, {}, from, to);
          }
          EXPECT_TRUE(y_s == y_c) << "y at " << y_off << ", m at " << m_off << ", n " << n << ", cut " << cut;
          EXPECT_TRUE(m_s == m_c) << "y at " << y_off << ", m at " << m_off << ", n " << n << ", cut " << cut;
          if (n > 0) EXPECT_EQ(y_s.data[y_off + n - 1], x.data[n - 1] * 2 + 1);
        }
      }
    }
  }
  // Rows of 1001: every row starts on a different part of a line.
  const ir::Kernel streaming2 = affine_and_sign(2, true), caching2 = affine_and_sign(2, false);
  Compiled streamed2(streaming2), cached2(caching2);
  const int64_t rows = 5, cols = 1001;
  Aligned<float> x2(rows * cols, 0.f), y_s(rows * cols + slack, 0.f), y_c(rows * cols + slack, 0.f);
  Aligned<uint8_t> m_s(rows * cols + slack, 0), m_c(rows * cols + slack, 0);
  for (int64_t i = 0; i < rows * cols; ++i) x2.data[i] = static_cast<float>(i % 13) - 6.f;
  const std::vector<int64_t> ints =
      test::launch_ints(caching2, {rows, cols}, {{0, {cols, 1}}, {5, {cols, 1}}, {2, {cols, 1}}});
  streamed2({x2.data, y_s.data, m_s.data}, ints, {}, 0, rows * cols);
  cached2({x2.data, y_c.data, m_c.data}, ints, {}, 0, rows * cols);
  EXPECT_TRUE(y_s == y_c);
  EXPECT_TRUE(m_s == m_c);
}

// sin/cos's exact rerun of a run (arguments past the float reduction's
// limit) stores over what the streaming loop stored.
TEST(Codegen, StreamingStoresAndTheExactSinCosRerunAgree) {
  auto sin_kernel = [](bool streaming) {
    test::KernelBuilder b(1);
    int x = b.access(DType::Float32, ir::Inner::Contiguous);
    int out = b.access(DType::Float32, ir::Inner::Contiguous);
    b.store(out, b.node(Op::Sin, DType::Float32, b.load(x)));
    b.k.streaming_stores = streaming;
    return b.k;
  };
  const ir::Kernel caching = sin_kernel(false);
  Compiled streamed(sin_kernel(true)), cached(caching);
  const int64_t n = 3000;
  Aligned<float> x(n, 0.f), s(n, 0.f), c(n, 0.f);
  for (int64_t i = 0; i < n; ++i) x.data[i] = i == 2500 ? 1.25e8f : 0.01f * static_cast<float>(i);
  const std::vector<int64_t> ints = test::dense_ints(caching, {n});
  streamed({x.data, s.data}, ints, {}, 0, n);
  cached({x.data, c.data}, ints, {}, 0, n);
  EXPECT_TRUE(s == c);
  EXPECT_NEAR(s.data[2500], std::sin(1.25e8), 2e-7);
}

namespace {

// out = f3(f2(f1(x)) * x): the functions on one path, as the benchmark chain.
ir::Kernel serial_math(DType t, Op f1, Op f2, Op f3) {
  test::KernelBuilder b(1);
  int x = b.access(t, ir::Inner::Contiguous);
  int out = b.access(t, ir::Inner::Contiguous);
  int v = b.load(x);
  int y = b.node(f3, t, b.node(Op::Mul, t, b.node(f2, t, b.node(f1, t, v)), v));
  b.store(out, y);
  return b.k;
}

// GELU's backward: erf and exp of x on separate paths, then combined.
ir::Kernel parallel_math() {
  test::KernelBuilder b(1);
  const DType f = DType::Float32;
  int x = b.access(f, ir::Inner::Contiguous);
  int out = b.access(f, ir::Inner::Contiguous);
  int v = b.load(x);
  int cdf = b.node(Op::Erf, f, b.node(Op::Mul, f, v, b.constant(f, 0.7071067811865476)));
  int pdf = b.node(Op::Exp, f, b.node(Op::Mul, f, b.node(Op::Mul, f, v, v), b.constant(f, -0.5)));
  b.store(out, b.node(Op::Add, f, cdf, b.node(Op::Mul, f, v, pdf)));
  return b.k;
}

}  // namespace

// Interleaving 8 vectors deep pays where one value passes through several
// math functions (latency-bound); parallel functions already overlap.
TEST(Codegen, MathChainDepthCountsFunctionsOnOnePath) {
  EXPECT_EQ(codegen::traits_of(serial_math(DType::Float32, Op::Sin, Op::Exp, Op::Tanh)).math_chain_depth, 3);
  EXPECT_EQ(codegen::traits_of(serial_math(DType::Float32, Op::Sigmoid, Op::Neg, Op::Erf)).math_chain_depth, 2);
  EXPECT_EQ(codegen::traits_of(parallel_math()).math_chain_depth, 1);
  // double math calls libm: none of kiln's own functions
  EXPECT_EQ(codegen::traits_of(serial_math(DType::Float64, Op::Sin, Op::Exp, Op::Tanh)).math_chain_depth, 0);
}

// Deep kernels compile with different code generation passes (an LLVM
// option set while the passes are added); the next kernel must get the
// default passes back, so its object is the same whatever compiled before.
TEST(Codegen, ObjectsDoNotDependOnWhatCompiledBefore) {
  test::KernelBuilder b(1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int out = b.access(DType::Float32, ir::Inner::Contiguous);
  b.store(out, b.node(Op::Exp, DType::Float32, b.load(x)));
  const ir::Kernel deep = serial_math(DType::Float32, Op::Sin, Op::Exp, Op::Tanh);
  const std::string first = codegen::compile(b.k, "kiln_exp", {}).object;
  const std::string deep_first = codegen::compile(deep, "kiln_deep", {}).object;
  EXPECT_EQ(codegen::compile(b.k, "kiln_exp", {}).object, first);
  EXPECT_EQ(codegen::compile(deep, "kiln_deep", {}).object, deep_first);
}

// Compile time is the compiling thread's CPU time, which other threads'
// work does not inflate; wall time is reported beside it.
TEST(Codegen, CompileTimeIsThreadCpuTimeBesideWallTime) {
  const codegen::CompiledObject obj = codegen::compile(parallel_math(), "kiln_gelu", {});
  EXPECT_GT(obj.compile_ms, 0);
  EXPECT_GE(obj.compile_wall_ms,
            obj.compile_ms * 0.99);  // both clocks tick in steps; a thread cannot run longer than it took
}
