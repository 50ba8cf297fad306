// Eager's argument checks for a call whose inputs are not computed yet.
//
// A CPU kernel checks its arguments (dtypes it supports, shapes that
// broadcast, in-place writes that fit, overlaps it refuses, scalars that fit
// the dtype) before it reads any data, and raises eager's error with eager's
// exception type. Those checks are a function of the arguments' metadata
// and scalar values, so kiln runs each distinct case once, on the calling
// thread: on the host (library kernels), or, for ops recorded into a lazy
// trace, whose inputs may not exist yet, on zero-filled twins of the
// arguments. Its verdict then holds for every later call of the case.
//
// A case is the arguments' pattern, not their sizes (shape_inference.h's
// argument_pattern): which sizes and strides are 0, 1, or equal to each
// other, with the dtypes, ranks, flags and integer arguments. A CPU kernel's
// checks compare sizes with each other and with 0 and 1 (broadcasting, a
// matmul's inner dimensions, an empty input); so a sequence of a new length
// is not checked again. What compares sizes by magnitude (a kernel larger
// than its input) is the meta kernel's to raise, and it runs for every new
// size.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "dispatch/eager/op_info.h"
#include "dispatch/eager/shape_inference.h"

namespace kiln::dispatch {

// The case a call belongs to: `argument_pattern` (shape_inference.h), and
// the values of the scalars that do not fit every dtype of the call's
// tensors (a fill_(1e20) of a half tensor raises; the changing learning
// rate of an optimizer step is one case).
uint64_t argument_case(uint64_t argument_pattern, const torch::jit::Stack& stack, size_t first);

// Runs the op's CPU kernel on zero-filled host twins of stack[first..]
// (same sizes, strides, offsets, dtypes and storage sharing; a throwaway
// generator): throws what eager throws for these arguments, else returns
// whether the results' geometry agrees with the meta kernel's.
OpInfo::Verdict check_on_zeroed_twins(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& stack,
                                      size_t first, c10::DeviceIndex index, const InferredShapes& shapes);

// The first-sight check of a traced call: check_on_zeroed_twins on a small
// call of the same case (small_stand_in.h) where there is one and it
// agrees, else on the call itself. What the small call raises or warns, or
// a disagreement, is checked again at full size: eager's message names the
// call's own sizes, and a kernel may bound sizes in ways the case does not
// describe.
OpInfo::Verdict check_case_on_twins(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& stack,
                                    size_t first, c10::DeviceIndex index, const InferredShapes& shapes);

}  // namespace kiln::dispatch
