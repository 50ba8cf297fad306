// Codegen: element and row kernels (layouts, dtypes, casts, reductions, streaming stores) run on host arrays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "compiled_kernel.h"
#include "kernel_builder.h"
#include "kiln/codegen.h"

using namespace kiln;
using ir::DType;
using ir::Op;
using test::Compiled;

namespace {

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

// Float max and min reductions vectorize (maxnum over the non-NaN values and
// a NaN flag of their own) and keep eager's answers: a NaN anywhere in the
// row, in the vector body or the remainder, makes the result NaN; infinities
// and rows of one value come back as they are.
TEST(Codegen, FloatMaxAndMinReductionsVectorizeAndPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int n = 37;  // two 16-lane vectors and a remainder of 5
  for (ir::ReduceKind kind : {ir::ReduceKind::Max, ir::ReduceKind::Min}) {
    test::KernelBuilder b(2, 1);
    int x = b.access(DType::Float32, ir::Inner::Contiguous);
    int out = b.access(DType::Float32, ir::Inner::Broadcast, true);
    b.store(out, b.reduce(kind, DType::Float32, b.load(x)));
    const std::string ir = codegen::compile(b.k, "kiln_extreme", {}, /*want_ir=*/true).llvm_ir;
    EXPECT_NE(ir.find(kind == ir::ReduceKind::Max ? "llvm.vector.reduce.fmax" : "llvm.vector.reduce.fmin"),
              std::string::npos);
    Compiled run(b.k);
    const int rows = 6;
    std::vector<float> xs(rows * n);
    for (int i = 0; i < rows * n; ++i) xs[i] = std::sin(i * 0.7f) * 100;
    xs[1 * n + 3] = nan;      // in the vector body
    xs[2 * n + n - 1] = nan;  // in the remainder
    xs[3 * n + 20] = INFINITY;
    xs[3 * n + 21] = -INFINITY;
    for (int j = 0; j < n; ++j) xs[4 * n + j] = -INFINITY;
    for (int j = 0; j < n; ++j) xs[5 * n + j] = 2.5f;
    std::vector<float> outs(rows);
    run({xs.data(), outs.data()}, test::launch_ints(b.k, {rows, n}, {{0, {n, 1}}, {0, {1, 0}}}), {}, 0, rows);
    for (int r = 0; r < rows; ++r) {
      float want = kind == ir::ReduceKind::Max ? -INFINITY : INFINITY;
      bool saw_nan = false;
      for (int j = 0; j < n; ++j) {
        const float v = xs[r * n + j];
        saw_nan |= std::isnan(v);
        want = kind == ir::ReduceKind::Max ? std::max(want, v) : std::min(want, v);
      }
      if (saw_nan) EXPECT_TRUE(std::isnan(outs[r])) << "row " << r;
      else EXPECT_EQ(outs[r], want) << "row " << r;
    }
  }
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
