// A small call of the same argument case, for the first-sight check of a
// large one.
//
// A traced op's first call of each case runs its CPU kernel on zero-filled
// twins of its arguments (argument_check.h). On large tensors that is a
// whole wasted computation on fresh memory: the first step of a chain of
// pointwise ops over 4M floats spent most of its time in page faults of
// such checks. The check's verdict belongs to the case, not the sizes
// (shape_inference.h's argument_pattern), so a call with small sizes of the
// same case gives it at the cost of a few microseconds.
//
// The stand-in maps every tensor size of 2 or more to a small one,
// keeping their order (so equal sizes stay equal, and which is larger
// stays so); 0 and 1 stay. It exists only where nothing else in the call
// refers to sizes: every device tensor contiguous at offset 0, tensors
// sharing storage of one shape, and no integer argument that holds an
// integer (a view's shape, a dim, a narrow's length could name a size).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>

namespace kiln::dispatch {

// Calls whose largest tensor is smaller than this are checked as they are:
// there the check costs about what building a stand-in does.
inline constexpr int64_t kStandInMinElements = int64_t{1} << 16;

// stack[first..] with each device tensor replaced by a fresh device tensor
// of the small sizes (one per storage, so sharing stays), everything else
// as it is; nullopt where the call has no stand-in (see above).
std::optional<torch::jit::Stack> small_stand_in(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                                size_t first);

}  // namespace kiln::dispatch
