// The fusion rules (docs/fusion.md, "Fusion rules"), pinned by exact kernel
// counts (has_kernels, which prints every region when a count is wrong), and
// the planned kernels run through codegen on host arrays to check that fusing
// kept eager's answers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "kiln/codegen.h"
#include "kiln/fusion.h"
#include "plan_check.h"
#include "trace_builder.h"

using namespace kiln;
using ir::DType;
using ir::Op;
using kiln::test::has_kernels;
using trace::View;

using test::F;
using test::iota;
using test::TraceBuilder;

TEST(Fusion, GeluTanhChainIsOneKernel) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {64, 33};
  const size_t n = 64 * 33;
  int32_t x = tb.buffer(n, false);
  tb.memory[x] = iota(n);
  std::vector<int32_t> t;
  for (int i = 0; i < 8; ++i) t.push_back(tb.buffer(n));
  auto V = [&](int32_t b) { return TraceBuilder::view(b, s, s); };
  tb.binary(Op::Mul, V(x), V(x), V(t[0]), s);     // x^2
  tb.binary(Op::Mul, V(t[0]), V(x), V(t[1]), s);  // x^3
  tb.with_scalar(Op::Mul, V(t[1]), 0.044715, V(t[2]), s);
  tb.binary(Op::Add, V(x), V(t[2]), V(t[3]), s);
  tb.with_scalar(Op::Mul, V(t[3]), 0.7978845608, V(t[4]), s);
  tb.unary(Op::Tanh, V(t[4]), V(t[5]), s);
  tb.with_scalar(Op::Add, V(t[5]), 1.0, V(t[6]), s);
  tb.binary(Op::Mul, V(x), V(t[6]), V(t[7]), s);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 1));
  for (size_t i = 0; i < n; i += 97) {
    float v = tb.memory[x][i];
    float want = v * (1.f + std::tanh(0.7978845608f * (v + 0.044715f * (v * v * v))));
    EXPECT_NEAR(tb.memory[t[7]][i], want, 1e-5f);
  }
}

TEST(Fusion, BroadcastMulAddIsOneKernel) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {4, 8};
  int32_t x = tb.buffer(32, false), y = tb.buffer(8, false), z = tb.buffer(4, false);
  int32_t xy = tb.buffer(32), out = tb.buffer(32);
  tb.memory[x] = iota(32);
  tb.memory[y] = iota(8, 0.5f);
  tb.memory[z] = iota(4, 2.f);
  tb.binary(Op::Mul, TraceBuilder::view(x, s, s), TraceBuilder::view(y, {8}, s), TraceBuilder::view(xy, s, s), s);
  tb.binary(Op::Add, TraceBuilder::view(xy, s, s), TraceBuilder::view(z, {4, 1}, s), TraceBuilder::view(out, s, s), s);
  auto p = tb.run();
  ASSERT_TRUE(has_kernels(p, tb.t, 1));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j) {
      volatile float prod = tb.memory[x][i * 8 + j] * tb.memory[y][j];
      EXPECT_EQ(tb.memory[out][i * 8 + j], prod + tb.memory[z][i]);
    }
  }
}

TEST(Fusion, SoftmaxFromItsOpsIsOneKernel) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {6, 10}, r = {6, 1};
  int32_t x = tb.buffer(60, false), m = tb.buffer(6), d = tb.buffer(60), e = tb.buffer(60), sum = tb.buffer(6),
          out = tb.buffer(60);
  tb.memory[x] = iota(60, 0.7f);
  tb.reduce_last(ir::ReduceKind::Max, TraceBuilder::view(x, s, s), TraceBuilder::view(m, r, s), s);
  tb.binary(Op::Sub, TraceBuilder::view(x, s, s), TraceBuilder::view(m, r, s), TraceBuilder::view(d, s, s), s);
  tb.unary(Op::Exp, TraceBuilder::view(d, s, s), TraceBuilder::view(e, s, s), s);
  tb.reduce_last(ir::ReduceKind::Sum, TraceBuilder::view(e, s, s), TraceBuilder::view(sum, r, s), s);
  tb.binary(Op::Div, TraceBuilder::view(e, s, s), TraceBuilder::view(sum, r, s), TraceBuilder::view(out, s, s), s);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 1));
  for (int i = 0; i < 6; ++i) {
    double mx = -INFINITY, total = 0;
    for (int j = 0; j < 10; ++j) mx = std::max(mx, double(tb.memory[x][i * 10 + j]));
    for (int j = 0; j < 10; ++j) total += std::exp(tb.memory[x][i * 10 + j] - mx);
    for (int j = 0; j < 10; ++j)
      EXPECT_NEAR(tb.memory[out][i * 10 + j], std::exp(tb.memory[x][i * 10 + j] - mx) / total, 1e-6);
  }
}

TEST(Fusion, LayerNormFromItsOpsIsOneKernel) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {5, 16}, r = {5, 1};
  const int64_t n = 80;
  int32_t x = tb.buffer(n, false), w = tb.buffer(16, false), b = tb.buffer(16, false);
  int32_t sum = tb.buffer(5), mean = tb.buffer(5), xc = tb.buffer(n), sq = tb.buffer(n), ssum = tb.buffer(5),
          var = tb.buffer(5), ve = tb.buffer(5), rstd = tb.buffer(5), norm = tb.buffer(n), scaled = tb.buffer(n),
          out = tb.buffer(n);
  tb.memory[x] = iota(n, 0.3f);
  tb.memory[w] = iota(16, 0.05f, 1.f);
  tb.memory[b] = iota(16, 0.01f, 0.f);
  auto S = [&](int32_t id) { return TraceBuilder::view(id, s, s); };
  auto R = [&](int32_t id) { return TraceBuilder::view(id, r, s); };
  auto RR = [&](int32_t id) { return TraceBuilder::view(id, r, r); };
  tb.reduce_last(ir::ReduceKind::Sum, S(x), R(sum), s);
  tb.with_scalar(Op::Div, RR(sum), 16, RR(mean), r);
  tb.binary(Op::Sub, S(x), R(mean), S(xc), s);
  tb.binary(Op::Mul, S(xc), S(xc), S(sq), s);
  tb.reduce_last(ir::ReduceKind::Sum, S(sq), R(ssum), s);
  tb.with_scalar(Op::Div, RR(ssum), 16, RR(var), r);
  tb.with_scalar(Op::Add, RR(var), 1e-5, RR(ve), r);
  tb.unary(Op::Rsqrt, RR(ve), RR(rstd), r);
  tb.binary(Op::Mul, S(xc), R(rstd), S(norm), s);
  tb.binary(Op::Mul, S(norm), TraceBuilder::view(w, {16}, s), S(scaled), s);
  tb.binary(Op::Add, S(scaled), TraceBuilder::view(b, {16}, s), S(out), s);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 1));
  for (int i = 0; i < 5; ++i) {
    double mu = 0, v = 0;
    for (int j = 0; j < 16; ++j) mu += tb.memory[x][i * 16 + j] / 16.0;
    for (int j = 0; j < 16; ++j) v += std::pow(tb.memory[x][i * 16 + j] - mu, 2) / 16.0;
    for (int j = 0; j < 16; ++j) {
      double want = (tb.memory[x][i * 16 + j] - mu) / std::sqrt(v + 1e-5) * tb.memory[w][j] + tb.memory[b][j];
      EXPECT_NEAR(tb.memory[out][i * 16 + j], want, 1e-4);
    }
  }
}

TEST(Fusion, AdamWUpdateOfOneParameterIsOneKernel) {
  // param.mul_(1 - lr*wd); m.lerp_(g, 1-b1) as m + w*(g-m); v.mul_(b2).addcmul_(g, g, 1-b2);
  // denom = sqrt(v)/bc2 + eps; param.addcdiv_(m, denom, -step)
  TraceBuilder tb;
  const std::vector<int64_t> s = {1000};
  int32_t p = tb.buffer(1000, false), g = tb.buffer(1000, false), m = tb.buffer(1000, false),
          v = tb.buffer(1000, false);
  int32_t gm = tb.buffer(1000), gg = tb.buffer(1000), ggs = tb.buffer(1000), sq = tb.buffer(1000),
          den = tb.buffer(1000), den2 = tb.buffer(1000), ratio = tb.buffer(1000), upd = tb.buffer(1000),
          wgm = tb.buffer(1000);
  tb.memory[p] = iota(1000);
  tb.memory[g] = iota(1000, 0.001f, -0.02f);
  tb.memory[m] = iota(1000, 0.0001f, 0.f);
  tb.memory[v] = iota(1000, 0.00001f, 0.001f);
  auto P0 = tb.memory[p], G0 = tb.memory[g], M0 = tb.memory[m], V0 = tb.memory[v];
  auto V_ = [&](int32_t id) { return TraceBuilder::view(id, s, s); };
  tb.with_scalar(Op::Mul, V_(p), 1 - 1e-3 * 1e-2, V_(p), s);
  tb.binary(Op::Sub, V_(g), V_(m), V_(gm), s);
  tb.with_scalar(Op::Mul, V_(gm), 0.1, V_(wgm), s);
  tb.binary(Op::Add, V_(m), V_(wgm), V_(m), s);
  tb.with_scalar(Op::Mul, V_(v), 0.999, V_(v), s);
  tb.binary(Op::Mul, V_(g), V_(g), V_(gg), s);
  tb.with_scalar(Op::Mul, V_(gg), 0.001, V_(ggs), s);
  tb.binary(Op::Add, V_(v), V_(ggs), V_(v), s);
  tb.unary(Op::Sqrt, V_(v), V_(sq), s);
  tb.with_scalar(Op::Div, V_(sq), 0.0316, V_(den), s);
  tb.with_scalar(Op::Add, V_(den), 1e-8, V_(den2), s);
  tb.binary(Op::Div, V_(m), V_(den2), V_(ratio), s);
  tb.with_scalar(Op::Mul, V_(ratio), -1e-2, V_(upd), s);
  tb.binary(Op::Add, V_(p), V_(upd), V_(p), s);
  for (int32_t dead : {gm, gg, ggs, sq, den, den2, ratio, upd, wgm}) tb.t.buffers[dead].dead = true;
  auto plan = tb.run();
  EXPECT_TRUE(has_kernels(plan, tb.t, 1));
  EXPECT_EQ(plan.bytes_not_written, 9 * 1000 * 4);
  for (int i = 0; i < 1000; i += 31) {
    float pm = P0[i] * static_cast<float>(1 - 1e-3 * 1e-2);
    float mm = M0[i] + (G0[i] - M0[i]) * 0.1f;
    float vv = V0[i] * 0.999f + G0[i] * G0[i] * 0.001f;
    float pp = pm + mm / (std::sqrt(vv) / 0.0316f + 1e-8f) * -1e-2f;
    EXPECT_NEAR(tb.memory[m][i], mm, 1e-7);
    EXPECT_NEAR(tb.memory[v][i], vv, 1e-9);
    EXPECT_NEAR(tb.memory[p][i], pp, 1e-5);
  }
}

// A foreach optimizer step records every parameter's first op, then every
// parameter's second, ...: ops of different parameters share no buffer, so
// they are regrouped and each parameter's update is still one kernel, with
// eager's results.
TEST(Fusion, InterleavedUpdatesOfSeveralParametersAreOneKernelEach) {
  TraceBuilder tb;
  const std::vector<std::vector<int64_t>> shapes = {{300}, {7, 50}, {300}};
  struct Param {
    int32_t p, g, m, t;
    std::vector<float> p0, g0, m0;
  };
  std::vector<Param> params;
  for (const auto& s : shapes) {
    const int64_t n = s.size() == 1 ? s[0] : s[0] * s[1];
    Param q{tb.buffer(n, false), tb.buffer(n, false), tb.buffer(n, false), tb.buffer(n), {}, {}, {}};
    tb.memory[q.p] = iota(n, 0.5f, 0.01f);
    tb.memory[q.g] = iota(n, -0.2f, 0.003f);
    tb.memory[q.m] = iota(n, 0.1f, -0.001f);
    q.p0 = tb.memory[q.p], q.g0 = tb.memory[q.g], q.m0 = tb.memory[q.m];
    params.push_back(q);
  }
  auto V = [&](int32_t id, size_t i) { return TraceBuilder::view(id, shapes[i], shapes[i]); };
  for (size_t i = 0; i < params.size(); ++i)
    tb.with_scalar(Op::Mul, V(params[i].m, i), 0.9, V(params[i].m, i), shapes[i]);
  for (size_t i = 0; i < params.size(); ++i)
    tb.with_scalar(Op::Mul, V(params[i].g, i), 0.1, V(params[i].t, i), shapes[i]);
  for (size_t i = 0; i < params.size(); ++i)
    tb.binary(Op::Add, V(params[i].m, i), V(params[i].t, i), V(params[i].m, i), shapes[i]);
  for (size_t i = 0; i < params.size(); ++i)
    tb.binary(Op::Sub, V(params[i].p, i), V(params[i].m, i), V(params[i].p, i), shapes[i]);
  for (const Param& q : params) tb.t.buffers[q.t].dead = true;
  auto plan = tb.run();
  ASSERT_TRUE(has_kernels(plan, tb.t, 3));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.regions[i].ops, (std::vector<int32_t>{int32_t(i), int32_t(i + 3), int32_t(i + 6), int32_t(i + 9)}));
  }
  for (const Param& q : params) {
    for (size_t j = 0; j < q.p0.size(); j += 7) {
      const float m = q.m0[j] * 0.9f + q.g0[j] * 0.1f;
      EXPECT_EQ(tb.memory[q.m][j], m);
      EXPECT_EQ(tb.memory[q.p][j], q.p0[j] - m);
    }
  }
}

TEST(Fusion, InPlaceOnAViewThenReadOfTheBaseGivesEagersResult) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {4, 4}, half = {2, 4};
  int32_t x = tb.buffer(16, false), y = tb.buffer(16);
  tb.memory[x] = iota(16, 1.f, 0.f);
  auto x0 = tb.memory[x];
  // x[2:].add_(100); y = x * 2
  View rows = TraceBuilder::view(x, half, half, /*offset=*/8);
  tb.with_scalar(Op::Add, rows, 100, rows, half);
  tb.with_scalar(Op::Mul, TraceBuilder::view(x, s, s), 2, TraceBuilder::view(y, s, s), s);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 2));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(tb.memory[y][i], (x0[i] + (i >= 8 ? 100 : 0)) * 2) << i;
}

TEST(Fusion, ReadThroughAnotherViewAfterAWriteSplits) {
  // y = x + 1 (into y); z = y^T * 2: y is read transposed, so not forwardable.
  TraceBuilder tb;
  const std::vector<int64_t> s = {3, 3};
  int32_t x = tb.buffer(9, false), y = tb.buffer(9), z = tb.buffer(9);
  tb.memory[x] = iota(9, 1.f, 0.f);
  tb.with_scalar(Op::Add, TraceBuilder::view(x, s, s), 1, TraceBuilder::view(y, s, s), s);
  View yt = TraceBuilder::view(y, s, s);
  std::swap(yt.strides[0], yt.strides[1]);
  tb.with_scalar(Op::Mul, yt, 2, TraceBuilder::view(z, s, s), s);
  auto p = tb.run();
  ASSERT_TRUE(has_kernels(p, tb.t, 2));
  EXPECT_NE(p.regions[0].ended_by.find("another view"), std::string::npos) << p.regions[0].ended_by;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(tb.memory[z][i * 3 + j], (tb.memory[x][j * 3 + i] + 1) * 2);
  }
}

TEST(Fusion, WriteOverAValueReadThroughAnotherViewSplits) {
  // z = x^T + 0 (reads x transposed); x.mul_(3): the write would clobber what z still reads.
  TraceBuilder tb;
  const std::vector<int64_t> s = {3, 3};
  int32_t x = tb.buffer(9, false), z = tb.buffer(9);
  tb.memory[x] = iota(9, 1.f, 0.f);
  auto x0 = tb.memory[x];
  View xt = TraceBuilder::view(x, s, s);
  std::swap(xt.strides[0], xt.strides[1]);
  tb.with_scalar(Op::Add, xt, 0, TraceBuilder::view(z, s, s), s);
  tb.with_scalar(Op::Mul, TraceBuilder::view(x, s, s), 3, TraceBuilder::view(x, s, s), s);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 2));
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(tb.memory[z][i * 3 + j], x0[j * 3 + i]);
      EXPECT_EQ(tb.memory[x][i * 3 + j], x0[i * 3 + j] * 3);
    }
  }
}

TEST(Fusion, ColumnBlocksOfOneBufferShareARegion) {
  // The gates of an RNN cell: g = [B, 4H] written block by block
  // (g[:, k*H:(k+1)*H] = x_k * 2), then each block read back (y = g_0 + g_3):
  // the blocks' extents interleave, their elements do not.
  TraceBuilder tb;
  const int64_t B = 3, H = 4;
  const std::vector<int64_t> space = {B, H};
  int32_t x = tb.buffer(B * H, false), g = tb.buffer(B * 4 * H), y = tb.buffer(B * H);
  tb.memory[x] = iota(B * H, 1.f, 0.f);
  auto block = [&](int64_t k) {
    View v = TraceBuilder::view(g, space, space, k * H);
    v.strides[0] = 4 * H;
    return v;
  };
  for (int64_t k = 0; k < 4; ++k)
    tb.with_scalar(Op::Mul, TraceBuilder::view(x, space, space), double(k + 1), block(k), space);
  tb.binary(Op::Add, block(0), block(3), TraceBuilder::view(y, space, space), space);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 1));
  for (int64_t i = 0; i < B * H; ++i) EXPECT_EQ(tb.memory[y][i], tb.memory[x][i] * 1 + tb.memory[x][i] * 4) << i;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < 4; ++k) {
      for (int64_t h = 0; h < H; ++h) {
        EXPECT_EQ(tb.memory[g][b * 4 * H + k * H + h], tb.memory[x][b * H + h] * float(k + 1));
      }
    }
  }
}

TEST(Fusion, BlocksThatDoOverlapStillSplit) {
  // Two [B, H] views of one buffer with row stride 4H, offsets 0 and H - 1:
  // they share an element per row, so the second write must not join.
  TraceBuilder tb;
  const int64_t B = 2, H = 4;
  const std::vector<int64_t> space = {B, H};
  int32_t x = tb.buffer(B * H, false), g = tb.buffer(B * 4 * H, false);
  auto block = [&](int64_t offset) {
    View v = TraceBuilder::view(g, space, space, offset);
    v.strides[0] = 4 * H;
    return v;
  };
  tb.with_scalar(Op::Mul, TraceBuilder::view(x, space, space), 2, block(0), space);
  tb.with_scalar(Op::Mul, TraceBuilder::view(x, space, space), 3, block(H - 1), space);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 2));
}

TEST(Fusion, FloatSinAndCosStayOutOfKernelsWithReductions) {
  // y = sin(x); m = y.amax(-1): a row kernel could not redo a row whose
  // arguments are too large for the float reduction, so the two split; a
  // reduction of exp(x) fuses as before.
  TraceBuilder tb;
  const std::vector<int64_t> s = {3, 4}, kept = {3, 1};
  int32_t x = tb.buffer(12, false), y = tb.buffer(12), m = tb.buffer(3), e = tb.buffer(12), n = tb.buffer(3);
  tb.memory[x] = iota(12, 1e6f, 3.f);  // large arguments
  tb.unary(Op::Sin, TraceBuilder::view(x, s, s), TraceBuilder::view(y, s, s), s);
  tb.reduce_last(ir::ReduceKind::Max, TraceBuilder::view(y, s, s), TraceBuilder::view(m, kept, s), s);
  tb.unary(Op::Exp, TraceBuilder::view(x, s, s), TraceBuilder::view(e, s, s), s);
  tb.reduce_last(ir::ReduceKind::Max, TraceBuilder::view(e, s, s), TraceBuilder::view(n, kept, s), s);
  auto p = tb.run();
  ASSERT_TRUE(has_kernels(p, tb.t, 2));
  EXPECT_EQ(p.regions[0].ops.size(), 1u);
  EXPECT_NE(p.regions[0].ended_by.find("sin/cos"), std::string::npos) << p.regions[0].ended_by;
  EXPECT_EQ(p.regions[1].ops.size(), 3u);  // the max of sin, then exp and its max
  for (int r = 0; r < 3; ++r) {
    float want = -2.f;
    for (int c = 0; c < 4; ++c) want = std::max(want, static_cast<float>(std::sin(double(tb.memory[x][r * 4 + c]))));
    EXPECT_NEAR(tb.memory[m][r], want, 1e-6f) << r;
  }
}

TEST(Fusion, DeadIntermediateReadByALaterRegionGetsScratch) {
  // t = x + 1 (t dies before the flush); u = t^T (another region): t must exist in memory.
  TraceBuilder tb;
  const std::vector<int64_t> s = {2, 2};
  int32_t x = tb.buffer(4, false), t = tb.buffer(4), u = tb.buffer(4);
  tb.memory[x] = {1, 2, 3, 4};
  tb.with_scalar(Op::Add, TraceBuilder::view(x, s, s), 1, TraceBuilder::view(t, s, s), s);
  View tt = TraceBuilder::view(t, s, s);
  std::swap(tt.strides[0], tt.strides[1]);
  tb.with_scalar(Op::Mul, tt, 1, TraceBuilder::view(u, s, s), s);
  tb.t.buffers[t].dead = true;
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 2));
  ASSERT_EQ(p.scratch.size(), 1u);
  EXPECT_EQ(p.scratch[0], (fusion::Plan::Scratch{t, 0, 1}));  // written by the first kernel, read by the second
  EXPECT_EQ(p.bytes_not_written, 0);
  EXPECT_EQ(tb.memory[u], (std::vector<float>{2, 4, 3, 5}));
}

// w is an output in x's memory (trace::Buffer::memory_of: x's owner freed
// it after z's op was recorded): its write must wait for z's transposed read.
TEST(Fusion, AnOutputInMemoryItTookWaitsForTheReadsOfTheOldContents) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {3, 3};
  int32_t x = tb.buffer(9, false), z = tb.buffer(9), w = tb.buffer(9);
  tb.t.buffers[w].memory_of = x;
  tb.memory[x] = iota(9, 1.f, 0.f);
  auto x0 = tb.memory[x];
  View xt = TraceBuilder::view(x, s, s);
  std::swap(xt.strides[0], xt.strides[1]);
  tb.with_scalar(Op::Add, xt, 0, TraceBuilder::view(z, s, s), s);
  tb.with_scalar(Op::Mul, TraceBuilder::view(z, s, s), 3, TraceBuilder::view(w, s, s), s);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 2));
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(tb.memory[z][i * 3 + j], x0[j * 3 + i]);
      EXPECT_EQ(tb.memory[x][i * 3 + j], x0[j * 3 + i] * 3);  // w's values, in x's memory
    }
  }
}

// Through the very view x was read through, w's write joins the region
// (rule 7: a kernel computes an iteration's values before its stores); dead,
// it is not written at all.
TEST(Fusion, AnOutputInMemoryItTookThroughTheSameViewSharesTheRegionAndCanDie) {
  for (bool dead : {false, true}) {
    TraceBuilder tb;
    const std::vector<int64_t> s = {4, 4};
    int32_t x = tb.buffer(16, false), z = tb.buffer(16), w = tb.buffer(16);
    tb.t.buffers[w].memory_of = x;
    tb.t.buffers[w].dead = dead;
    tb.memory[x] = iota(16);
    auto x0 = tb.memory[x];
    tb.with_scalar(Op::Add, TraceBuilder::view(x, s, s), 1, TraceBuilder::view(z, s, s), s);
    tb.with_scalar(Op::Mul, TraceBuilder::view(x, s, s), 2, TraceBuilder::view(w, s, s), s);
    auto p = tb.run();
    EXPECT_TRUE(has_kernels(p, tb.t, 1));
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(tb.memory[z][i], x0[i] + 1);
      EXPECT_EQ(tb.memory[x][i], dead ? x0[i] : x0[i] * 2);
    }
  }
}

// One allocation, one pointer slot: codegen takes different slots for
// different memory (alias scopes, a loop it may run twice), so an output in
// memory it took must be given the slot of the buffer it took it from.
TEST(Fusion, AnOutputInMemoryItTookSharesThatBuffersPointerSlot) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {4, 4};
  int32_t x = tb.buffer(16, false), z = tb.buffer(16), w = tb.buffer(16);
  tb.t.buffers[w].memory_of = x;
  tb.with_scalar(Op::Add, TraceBuilder::view(x, s, s), 1, TraceBuilder::view(z, s, s), s);
  tb.with_scalar(Op::Mul, TraceBuilder::view(x, s, s), 2, TraceBuilder::view(w, s, s), s);
  auto p = tb.run();
  ASSERT_TRUE(has_kernels(p, tb.t, 1));
  const fusion::PlannedKernel& k = p.kernels[0];
  EXPECT_EQ(k.buffer_ids, (std::vector<int32_t>{x, z}));
  EXPECT_EQ(k.kernel.num_buffers, 2);
  // x's load and w's store go through slot 0.
  int loads_and_stores_of_x = 0;
  for (const auto& a : k.kernel.accesses) loads_and_stores_of_x += a.buffer == 0;
  EXPECT_EQ(loads_and_stores_of_x, 2);
}

TEST(Fusion, RegionSizeLimitSplits) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {8};
  int32_t x = tb.buffer(8, false);
  for (int i = 0; i < 10; ++i) tb.with_scalar(Op::Add, TraceBuilder::view(x, s, s), 1, TraceBuilder::view(x, s, s), s);
  auto p = tb.run(4);
  ASSERT_TRUE(has_kernels(p, tb.t, 3));
  EXPECT_EQ(p.regions[0].ended_by, "size limit");
  EXPECT_EQ(tb.memory[x], std::vector<float>(8, 10.f));
}

TEST(Fusion, ReductionWithoutKeepdimBroadcastAgainstTheWrongDimSplits) {
  // m = x.sum(-1) (shape [4]); y = x - m broadcasts m along dim 1, not dim 0.
  TraceBuilder tb;
  const std::vector<int64_t> s = {4, 4};
  int32_t x = tb.buffer(16, false), m = tb.buffer(4), y = tb.buffer(16);
  tb.memory[x] = iota(16, 1.f, 0.f);
  View mrow;
  mrow.buffer = m;
  mrow.strides = {1, 0};  // row-level: stride 0 along the reduced dim
  tb.reduce_last(ir::ReduceKind::Sum, TraceBuilder::view(x, s, s), mrow, s);
  tb.binary(Op::Sub, TraceBuilder::view(x, s, s), TraceBuilder::view(m, {4}, s), TraceBuilder::view(y, s, s), s);
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 2));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      float mj = 0;
      for (int k = 0; k < 4; ++k) mj += tb.memory[x][j * 4 + k];
      EXPECT_EQ(tb.memory[y][i * 4 + j], tb.memory[x][i * 4 + j] - mj);
    }
  }
}

TEST(Fusion, ContiguousShapesShareOneKernel) {
  auto kernel_for = [](std::vector<int64_t> s) {
    TraceBuilder tb;
    int64_t n = 1;
    for (auto d : s) n *= d;
    int32_t x = tb.buffer(n, false), y = tb.buffer(n);
    tb.with_scalar(Op::Mul, TraceBuilder::view(x, s, s), 3, TraceBuilder::view(y, s, s), s);
    const fusion::Plan p = fusion::plan(tb.t, {});
    EXPECT_TRUE(has_kernels(p, tb.t, 1));
    return p.kernels.at(0);
  };
  auto a = kernel_for({8, 16, 3}), b = kernel_for({100}), c = kernel_for({5, 1, 7});
  EXPECT_EQ(a.kernel.rank, 1);
  EXPECT_EQ(ir::serialize(a.kernel), ir::serialize(b.kernel));
  EXPECT_EQ(ir::serialize(a.kernel), ir::serialize(c.kernel));
  EXPECT_EQ(a.work, 384);
  EXPECT_EQ(a.scalars, std::vector<double>{3});
}

// A launch storing at least Options::stream_min_bytes streams its stores,
// unless it writes in place (the lines it writes were just read).
TEST(Fusion, LargeLaunchesStreamTheirStores) {
  auto plan_of = [](int64_t n, int64_t min_bytes, bool in_place) {
    TraceBuilder tb;
    int32_t x = tb.buffer(n, false), y = in_place ? x : tb.buffer(n);
    tb.with_scalar(Op::Mul, TraceBuilder::view(x, {n}, {n}), 3, TraceBuilder::view(y, {n}, {n}), {n});
    fusion::Options o;
    o.stream_min_bytes = min_bytes;
    if (min_bytes != 0) EXPECT_NE(fusion::plan_signature(tb.t, o), fusion::plan_signature(tb.t, {}));
    const fusion::Plan p = fusion::plan(tb.t, o);
    EXPECT_TRUE(has_kernels(p, tb.t, 1));
    return p.kernels.at(0).kernel;
  };
  EXPECT_TRUE(plan_of(1024, 4096, false).streaming_stores);
  EXPECT_FALSE(plan_of(1023, 4096, false).streaming_stores);
  EXPECT_FALSE(plan_of(1024, 4096, true).streaming_stores);
  EXPECT_FALSE(plan_of(1 << 20, 0, false).streaming_stores);  // 0: never
}

TEST(Fusion, OpsWhoseStoresAllDiedCompileNothing) {
  TraceBuilder tb;
  const std::vector<int64_t> s = {8};
  int32_t x = tb.buffer(8, false), t = tb.buffer(8);
  tb.with_scalar(Op::Add, TraceBuilder::view(x, s, s), 1, TraceBuilder::view(t, s, s), s);
  tb.t.buffers[t].dead = true;
  auto p = fusion::plan(tb.t, {});
  EXPECT_TRUE(has_kernels(p, tb.t, 0, /*regions=*/1));
  EXPECT_EQ(p.bytes_not_written, 32);
}

TEST(Fusion, AValueLoadedBeforeAnInPlaceWriteKeepsTheOldContents) {
  // a = x * 2 (no store of its own); x.copy_(z + z) (does not read x); y = a + 1.
  // y must see the old x, though the kernel stores x before it stores y.
  TraceBuilder tb;
  const std::vector<int64_t> s = {16};
  int32_t x = tb.buffer(16, false), z = tb.buffer(16, false), a = tb.buffer(16), y = tb.buffer(16);
  tb.memory[x] = iota(16, 1.f, 0.f);
  tb.memory[z] = iota(16, 0.5f, 7.f);
  auto x0 = tb.memory[x];
  auto V = [&](int32_t id) { return TraceBuilder::view(id, s, s); };
  tb.with_scalar(Op::Mul, V(x), 2, V(a), s);
  tb.binary(Op::Add, V(z), V(z), V(x), s);
  tb.with_scalar(Op::Add, V(a), 1, V(y), s);
  tb.t.buffers[a].dead = true;  // so a's value only ever lives in registers
  auto p = tb.run();
  EXPECT_TRUE(has_kernels(p, tb.t, 1));
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(tb.memory[y][i], x0[i] * 2 + 1) << i;
    EXPECT_EQ(tb.memory[x][i], tb.memory[z][i] * 2) << i;
  }
}

TEST(Fusion, IndependentOpsDoNotShareAKernel) {
  // Two parameters updated one after the other: same shape, linked by no buffer.
  TraceBuilder tb;
  const std::vector<int64_t> s = {16};
  int32_t p = tb.buffer(16, false), q = tb.buffer(16, false), g = tb.buffer(16, false), h = tb.buffer(16, false),
          t = tb.buffer(16);
  auto V = [&](int32_t id) { return TraceBuilder::view(id, s, s); };
  tb.with_scalar(Op::Mul, V(p), 0.5, V(p), s);
  tb.with_scalar(Op::Mul, V(g), 2, V(t), s);  // shares nothing with p yet, but p reads t below
  tb.binary(Op::Add, V(p), V(t), V(p), s);
  tb.binary(Op::Add, V(q), V(h), V(q), s);  // the next parameter: another component
  tb.with_scalar(Op::Mul, V(q), 0.5, V(q), s);
  auto plan = tb.run();
  ASSERT_TRUE(has_kernels(plan, tb.t, 2));
  EXPECT_EQ(plan.regions[0].ops, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(plan.regions[0].ended_by, "no shared data");
  EXPECT_EQ(plan.regions[1].ops, (std::vector<int32_t>{3, 4}));
}
