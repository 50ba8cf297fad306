#include <gtest/gtest.h>

#include "kernel_builder.h"

using namespace kiln;
using ir::DType;
using ir::Op;

namespace {

ir::Kernel axpy(DType t) {
  test::KernelBuilder b(1);
  int x = b.access(t, ir::Inner::Contiguous);
  int y = b.access(t, ir::Inner::Contiguous);
  int out = b.access(t, ir::Inner::Contiguous);
  int s = b.scalar(t);
  b.store(out, b.node(Op::Add, t, b.node(Op::Mul, t, b.load(x), s), b.load(y)));
  return b.k;
}

}  // namespace

TEST(KernelIr, SerializationIsCanonical) {
  EXPECT_EQ(ir::serialize(axpy(DType::Float32)), ir::serialize(axpy(DType::Float32)));
  EXPECT_NE(ir::serialize(axpy(DType::Float32)), ir::serialize(axpy(DType::Float64)));
  ir::Kernel strided = axpy(DType::Float32);
  strided.accesses[0].inner = ir::Inner::Strided;
  EXPECT_NE(ir::serialize(strided), ir::serialize(axpy(DType::Float32)));
}

TEST(KernelIr, TextNamesOpsAccessesAndStores) {
  std::string text = ir::to_text(axpy(DType::Float32));
  EXPECT_NE(text.find("mul.f32"), std::string::npos) << text;
  EXPECT_NE(text.find("access a0: buffer 0 f32 inner=contiguous"), std::string::npos) << text;
  EXPECT_NE(text.find("store a2 <- %"), std::string::npos) << text;
}

TEST(KernelIr, ValidateRejectsMixedDtypes) {
  ir::Kernel k = axpy(DType::Float32);
  k.nodes[2].dtype = DType::Float64;  // the scalar claims f64, its slot says f32
  EXPECT_THROW(ir::validate(k), std::invalid_argument);
}

TEST(KernelIr, ValidateRejectsArithmeticInReducedFloat) {
  test::KernelBuilder b(1);
  int x = b.access(DType::BFloat16, ir::Inner::Contiguous);
  int out = b.access(DType::BFloat16, ir::Inner::Contiguous);
  b.store(out, b.node(Op::Add, DType::BFloat16, b.load(x), b.load(x)));
  try {
    ir::validate(b.k);
    FAIL() << "accepted bf16 arithmetic";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("reduced float"), std::string::npos) << e.what();
  }
}

TEST(KernelIr, ValidateRejectsAReductionReadingItself) {
  test::KernelBuilder b(2, 1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  b.k.reductions.push_back({ir::ReduceKind::Sum, DType::Float32, 1});
  b.load(x);
  b.node(Op::ReduceValue, DType::Float32, -1, -1, -1, 0);
  EXPECT_THROW(ir::validate(b.k), std::invalid_argument);
}

TEST(KernelIr, RowLevelNodesFollowTheirInputs) {
  test::KernelBuilder b(2, 1);
  int x = b.access(DType::Float32, ir::Inner::Contiguous);
  int m = b.access(DType::Float32, ir::Inner::Broadcast, /*row_invariant=*/true);
  int lx = b.load(x);
  int lm = b.load(m);
  int sum = b.reduce(ir::ReduceKind::Sum, DType::Float32, lx);
  int row = b.node(Op::Add, DType::Float32, sum, lm);
  int elem = b.node(Op::Add, DType::Float32, row, lx);
  auto level = ir::row_level_nodes(b.k);
  EXPECT_FALSE(level[lx]);
  EXPECT_TRUE(level[lm]);
  EXPECT_TRUE(level[row]);
  EXPECT_FALSE(level[elem]);
}

// Streaming stores write whole lines of outputs nothing in the kernel reads.
TEST(KernelIr, StreamingStoresOnlyWhereTheyCanStream) {
  ir::Kernel k = axpy(DType::Float32);
  EXPECT_TRUE(ir::can_stream_stores(k));
  k.streaming_stores = true;
  EXPECT_NO_THROW(ir::validate(k));
  EXPECT_NE(ir::serialize(k), ir::serialize(axpy(DType::Float32)));
  EXPECT_NE(ir::to_text(k).find("streaming-stores"), std::string::npos);

  ir::Kernel strided = k;
  strided.accesses[2].inner = ir::Inner::Strided;  // partial lines
  EXPECT_FALSE(ir::can_stream_stores(strided));
  EXPECT_THROW(ir::validate(strided), std::invalid_argument);

  ir::Kernel in_place = k;
  in_place.accesses[2].buffer = 0;  // out is x: its lines are cached by the loads
  EXPECT_FALSE(ir::can_stream_stores(in_place));
  EXPECT_THROW(ir::validate(in_place), std::invalid_argument);

  test::KernelBuilder rows(2, 1);
  int x = rows.access(DType::Float32, ir::Inner::Contiguous);
  int out = rows.access(DType::Float32, ir::Inner::Contiguous, /*row_invariant=*/true);
  rows.store(out, rows.reduce(ir::ReduceKind::Sum, DType::Float32, rows.load(x)));
  EXPECT_FALSE(ir::can_stream_stores(rows.k));
}
