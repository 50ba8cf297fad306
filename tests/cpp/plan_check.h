// Test helper: a plan's exact kernel and region counts, with every region
// printed when they are wrong.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>

#include "kiln/fusion.h"

namespace kiln::test {

// Whether `plan` has `kernels` kernels and `regions` regions (by default as
// many as kernels: a region compiles no kernel only when every store it makes
// died, rule 11 of docs/fusion.md). Use as ASSERT_TRUE(has_kernels(...)) or EXPECT_TRUE;
// on failure the message lists each region: its ops (index and name), its
// iteration space and reduced dims, whether it has a kernel and why it ended.
inline ::testing::AssertionResult has_kernels(const fusion::Plan& plan, const trace::Trace& trace, size_t kernels,
                                              size_t regions = SIZE_MAX) {
  if (regions == SIZE_MAX) regions = kernels;
  if (plan.kernels.size() == kernels && plan.regions.size() == regions) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << "expected " << kernels << " kernels in " << regions << " regions, got " << plan.kernels.size() << " kernels in "
     << plan.regions.size() << " regions:";
  for (size_t r = 0; r < plan.regions.size(); ++r) {
    const fusion::Region& region = plan.regions[r];
    bool has_kernel = false;
    for (const auto& k : plan.kernels) has_kernel = has_kernel || k.region == static_cast<int32_t>(r);
    os << "\n  region " << r << ": sizes [";
    for (size_t d = 0; d < region.sizes.size(); ++d) os << (d ? ", " : "") << region.sizes[d];
    os << "], reduced dims [";
    for (size_t d = 0, n = 0; d < 64; ++d) {
      if ((region.reduced >> d) & 1) os << (n++ ? ", " : "") << d;
    }
    os << "], " << (has_kernel ? "a kernel" : "no kernel (every store died)") << ", ended by \"" << region.ended_by
       << "\"\n    ops:";
    for (size_t i = 0; i < region.ops.size(); ++i) {
      os << (i ? ", " : " ") << region.ops[i] << " " << trace.ops.at(region.ops[i]).name;
    }
  }
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace kiln::test
