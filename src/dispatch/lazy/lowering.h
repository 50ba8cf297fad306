// The op-lowering table (lowering_table.cpp): ATen ops traced in lazy mode.
#pragma once

#include <string>
#include <vector>

#include "dispatch/lazy/lower_context.h"

namespace kiln::dispatch {

// Builds the op's TraceOp in `ctx`; throws Decline when it cannot.
using LoweringFn = void (*)(LowerCtx& ctx);

// The lowering of an operator ("aten::add_.Tensor"), or null when the op is
// not traceable. Functional, in-place and out= overloads share one.
LoweringFn find_lowering(const std::string& op_name);

}  // namespace kiln::dispatch
