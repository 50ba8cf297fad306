// Kernels the C++ micro-benchmarks share (defined in lazy_bench.cpp).
#pragma once

#include <cstdint>

#include "kiln/fusion.h"

namespace kiln::bench {

// The 8-op pointwise chain of bench/workloads.py (x*1.5+0.25, sin, *x, exp,
// -0.5, tanh, *2), planned as one kernel. The bits of `variant` switch the
// math parts on (1: sin, 2: exp, 4: tanh): 0 is the memory-bound frame, 7
// the whole chain; `n` is the element count.
fusion::PlannedKernel chain_kernel(int variant, int64_t n);

}  // namespace kiln::bench
