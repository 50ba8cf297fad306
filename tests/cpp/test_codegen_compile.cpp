// Codegen: compiling and loading objects, the fingerprint, math chain depth, deterministic objects, compile time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiled_kernel.h"
#include "kernel_builder.h"
#include "kiln/codegen.h"

using namespace kiln;
using ir::DType;
using ir::Op;
using test::Compiled;

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

// KILN_OPT_LEVEL: levels 0 and 1 leave loops scalar, 2 and 3 vectorize (a
// row sum ends in a vector reduction). Every level computes the same
// bits for kiln's own math; float row sums are summed in vector lanes at 2
// and 3 (as eager's kernels do), in order at 0 and 1: the same within
// tolerance. Each level is its own cache environment.
TEST(Codegen, EveryOptLevelComputesTheSameBits) {
  test::KernelBuilder pw(1);
  {
    const DType f = DType::Float32;
    int x = pw.access(f, ir::Inner::Contiguous);
    int out = pw.access(f, ir::Inner::Contiguous);
    int v = pw.load(x);
    pw.store(out, pw.node(Op::Add, f, pw.node(Op::Mul, f, pw.node(Op::Tanh, f, pw.node(Op::Exp, f, v)), v), v));
  }
  test::KernelBuilder row(2, 1);
  {
    int x = row.access(DType::Float32, ir::Inner::Contiguous);
    int out = row.access(DType::Float32, ir::Inner::Broadcast, true);
    row.store(out, row.reduce(ir::ReduceKind::Sum, DType::Float32, row.load(x)));
  }
  const int n = 1003, rows = 3, cols = 301;
  std::vector<float> xs(n), sums_in(rows * cols);
  for (int i = 0; i < n; ++i) xs[i] = std::sin(i * 0.37f) * 3;
  for (int i = 0; i < rows * cols; ++i) sums_in[i] = std::cos(i * 0.11f) * 1000;
  std::vector<std::vector<float>> pointwise;
  std::vector<std::string> fingerprints;
  for (int level = 0; level <= 3; ++level) {
    SCOPED_TRACE("KILN_OPT_LEVEL=" + std::to_string(level));
    codegen::Options o;
    o.opt_level = level;
    const std::string ir = codegen::compile(row.k, "kiln_levels", o, /*want_ir=*/true).llvm_ir;
    EXPECT_EQ(ir.find("vector.reduce.fadd") != std::string::npos, level >= 2) << ir;
    Compiled run_pw(pw.k, o);
    pointwise.emplace_back(n);
    run_pw({xs.data(), pointwise.back().data()}, test::dense_ints(pw.k, {n}), {}, 0, n);
    Compiled run_row(row.k, o);
    std::vector<float> sums(rows);
    run_row({sums_in.data(), sums.data()}, test::launch_ints(row.k, {rows, cols}, {{0, {cols, 1}}, {0, {1, 0}}}), {}, 0,
            rows);
    for (int r = 0; r < rows; ++r) {
      double want = 0;
      for (int c = 0; c < cols; ++c) want += sums_in[r * cols + c];
      EXPECT_NEAR(sums[r], want, 1e-5 * 1000 * cols) << "row " << r;
    }
    fingerprints.push_back(codegen::environment_fingerprint(o));
  }
  for (int level = 1; level <= 3; ++level) {
    EXPECT_EQ(0, std::memcmp(pointwise[level].data(), pointwise[0].data(), n * sizeof(float))) << level;
    for (int other = 0; other < level; ++other) EXPECT_NE(fingerprints[level], fingerprints[other]);
  }
  EXPECT_NE(fingerprints[0].find("opt_level=0"), std::string::npos) << fingerprints[0];
}

// KILN_SHAPE_SPECIALIZE: a kernel with its launch geometry baked in computes
// what the size-generic one computes from the same launch ints (pointwise:
// the same bits; a row sum: within the tolerance of its lanes), and is
// another kernel to the cache.
TEST(Codegen, BakedGeometryComputesWhatTheGenericKernelComputes) {
  test::KernelBuilder pw(2);
  {
    const DType f = DType::Float32;
    int x = pw.access(f, ir::Inner::Contiguous);
    int bias = pw.access(f, ir::Inner::Broadcast);  // one value per row
    int out = pw.access(f, ir::Inner::Contiguous);
    pw.store(out, pw.node(Op::Add, f, pw.node(Op::Tanh, f, pw.load(x)), pw.load(bias)));
  }
  test::KernelBuilder row(2, 1);
  {
    int x = row.access(DType::Float32, ir::Inner::Contiguous);
    int out = row.access(DType::Float32, ir::Inner::Broadcast, true);
    row.store(out, row.reduce(ir::ReduceKind::Sum, DType::Float32, row.load(x)));
  }
  const int rows = 7, cols = 301;
  std::vector<float> xs(rows * cols), bias(rows);
  for (int i = 0; i < rows * cols; ++i) xs[i] = std::sin(i * 0.37f) * 3;
  for (int r = 0; r < rows; ++r) bias[r] = r * 0.5f;
  const std::vector<int64_t> pw_ints =
      test::launch_ints(pw.k, {rows, cols}, {{0, {cols, 1}}, {0, {1, 0}}, {0, {cols, 1}}});
  const std::vector<int64_t> row_ints = test::launch_ints(row.k, {rows, cols}, {{0, {cols, 1}}, {0, {1, 0}}});
  auto baked = [](ir::Kernel k, const std::vector<int64_t>& ints) {
    k.baked_geometry.assign(ints.begin(), ints.begin() + k.geometry_ints_count());
    ir::validate(k);
    return k;
  };
  const ir::Kernel pw_baked = baked(pw.k, pw_ints), row_baked = baked(row.k, row_ints);
  EXPECT_NE(ir::serialize(pw_baked), ir::serialize(pw.k));
  EXPECT_NE(ir::to_text(pw_baked).find("baked geometry: 7 301"), std::string::npos) << ir::to_text(pw_baked);

  std::vector<float> generic(rows * cols), specialized(rows * cols);
  Compiled run_generic(pw.k), run_baked(pw_baked);
  run_generic({xs.data(), bias.data(), generic.data()}, pw_ints, {}, 0, rows * cols);
  run_baked({xs.data(), bias.data(), specialized.data()}, pw_ints, {}, 0, rows * cols);
  EXPECT_EQ(0, std::memcmp(generic.data(), specialized.data(), generic.size() * sizeof(float)));

  std::vector<float> sums(rows), baked_sums(rows);
  Compiled run_row(row.k), run_row_baked(row_baked);
  run_row({xs.data(), sums.data()}, row_ints, {}, 0, rows);
  // The baked kernel ignores the geometry it is given: zeros where sizes were.
  std::vector<int64_t> no_geometry = row_ints;
  for (int i = 0; i < row.k.geometry_ints_count(); ++i) no_geometry[i] = 0;
  run_row_baked({xs.data(), baked_sums.data()}, no_geometry, {}, 0, rows);
  for (int r = 0; r < rows; ++r) EXPECT_NEAR(baked_sums[r], sums[r], 1e-5 * 3 * cols) << "row " << r;

  ir::Kernel wrong = pw.k;
  wrong.baked_geometry = {rows, cols};
  EXPECT_THROW(ir::validate(wrong), std::invalid_argument);
}
