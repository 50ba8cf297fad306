// Plan signatures: what lets a flush reuse the plan of an earlier trace of the
// same structure, binding only the new trace's scalars.
#include <gtest/gtest.h>

#include "kiln/fusion.h"
#include "plan_check.h"
#include "trace_builder.h"

using namespace kiln;
using ir::Op;
using kiln::test::F;
using kiln::test::has_kernels;
using kiln::test::TraceBuilder;

// A plan is reused for a trace of the same structure: the signature ignores
// scalar values and sees everything that changes the plan.
TEST(Fusion, PlanSignatureIgnoresScalarValuesOnly) {
  auto make = [](double lr, int64_t step, bool dead, int64_t n, double constant) {
    trace::Trace t;
    for (int i = 0; i < 3; ++i) t.buffers.push_back({nullptr, size_t(n) * 4, i == 2, i == 2 && dead, nullptr});
    trace::TraceOp op;
    op.name = "test::update";
    op.sizes = {n};
    const int32_t scaled =
        op.add_node(Op::Mul, F, op.load(TraceBuilder::view(0, {n}, {n})), op.cast(op.scalar_float(lr), F));
    const int32_t shifted = op.add_node(Op::Add, F, scaled, op.cast(op.scalar_int(step), F));
    op.store(TraceBuilder::view(1, {n}, {n}), op.add_node(Op::Add, F, shifted, op.constant(F, constant)));
    op.store(TraceBuilder::view(2, {n}, {n}), scaled);
    t.ops.push_back(std::move(op));
    return t;
  };
  const fusion::Options o;
  const std::string base = fusion::plan_signature(make(0.1, 3, false, 64, 1.0), o);
  EXPECT_EQ(fusion::plan_signature(make(0.2, 7, false, 64, 1.0), o), base);
  EXPECT_NE(fusion::plan_signature(make(0.1, 3, true, 64, 1.0), o), base);   // a store dropped
  EXPECT_NE(fusion::plan_signature(make(0.1, 3, false, 65, 1.0), o), base);  // another shape
  EXPECT_NE(fusion::plan_signature(make(0.1, 3, false, 64, 2.0), o), base);  // a constant is code
  EXPECT_NE(fusion::plan_signature(make(0.1, 3, false, 64, 1.0), {.max_ops = 2}), base);

  // The plan of the first trace, bound to the second trace's scalars, equals
  // the second trace's own plan.
  const trace::Trace first = make(0.1, 3, false, 64, 1.0), second = make(-2.5, 11, false, 64, 1.0);
  const fusion::Plan reused = fusion::plan(first, o), own = fusion::plan(second, o);
  ASSERT_TRUE(has_kernels(reused, first, 1));
  ASSERT_TRUE(has_kernels(own, second, 1));
  const fusion::PlannedKernel& k = reused.kernels[0];
  std::vector<int64_t> ints = k.ints;
  std::vector<double> scalars = k.scalars;
  fusion::bind_scalars(k, second, ints, scalars);
  EXPECT_NE(scalars, k.scalars);
  EXPECT_EQ(scalars, own.kernels[0].scalars);
  EXPECT_EQ(ints, own.kernels[0].ints);
}
