// oneMKL's vector math (VML) picks each function's kernel (instruction set
// and accuracy) at that function's first call. ATen sends a large float or
// double sin, exp, tanh... to VML from every thread of its OpenMP team at
// once, and a first call made so can run one thread's chunk with the
// low-accuracy (EP) kernel although ATen asks for the high-accuracy one:
// the process's first torch.sin over 4096 elements came out with errors of
// 1.5e-4 in its second half, in 3 of 120 fresh processes under load, kiln
// not loaded (pytorch/pytorch#188792, oneMKL 2024.2 as torch 2.13 bundles
// it). Since the results would then differ from CPU's, kiln makes
// each function's first call itself, on one thread, at start-up.
#pragma once

#include <string>
#include <vector>

namespace kiln::dispatch {

// Calls each VML-backed ATen op once on one element, in float and double,
// so that oneMKL resolves its kernels before any concurrent call. A no-op
// without MKL. Idempotent; about 10 ms once per process (most of it MKL's
// own initialization, which the program's first such op would pay).
void resolve_mkl_vml_dispatch();

// The ops resolve_mkl_vml_dispatch calls: those ATen's cpu/vml.h sends to
// MKL (the tests check the list against the installed header).
const std::vector<std::string>& mkl_vml_ops();

}  // namespace kiln::dispatch
