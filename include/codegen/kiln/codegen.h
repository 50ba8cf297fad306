// Codegen: Kernel IR -> LLVM IR -> optimized relocatable object -> code
// loaded through ORC. The only layer that includes LLVM (in src/codegen).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/kernel_ir.h"

namespace kiln::codegen {

// Every compiled kernel has this signature. `begin`/`end` are a range of work
// units (elements of a pointwise kernel, rows of a row kernel), so a launch
// can split its space over threads.
using KernelFn = void (*)(void* const* buffers, const int64_t* ints, const double* scalars, int64_t begin, int64_t end);

struct Options {
  // KILN_FAST_MATH (default off, as the knob's; test Engine.OptionsFollowTheKnobs):
  // reassociation, contraction, approximate functions.
  bool fast_math = false;
  // kiln's own math may use AVX-512-only instructions (vscalefps in exp)
  // where the host has them; false keeps it to the code every x86-64 with
  // FMA runs (what hosts without AVX-512 get; tests check both agree).
  bool avx512_math = true;
  // KILN_OPT_LEVEL (default 2, as the knob's): 0 no IR passes and LLVM's
  // fast instruction selection, 1 cleanup passes only, 2 kiln's kernel
  // pipeline (kPassPipeline in jit.cpp), 3 LLVM's O3 pipeline.
  int opt_level = 2;
};

// What changes the machine code besides the IR: kiln's codegen version, LLVM
// version, target triple, host CPU name and features, options. Part of every
// executable key: an object built for another CPU would crash here.
std::string environment_fingerprint(const Options& options);

// A hash of the sources that shape generated code (tools/build_identity.cmake):
// part of the fingerprint, so another build of kiln never loads this one's kernels.
const char* build_identity();

struct CompiledObject {
  std::string object;   // relocatable ELF object bytes (what a persistent cache stores)
  std::string llvm_ir;  // optimized LLVM IR text, only when asked for (KILN_DUMP_DIR)
  // CPU time the compiling thread spent, and the wall time it took: more
  // when kernels launched earlier run on the same cores meanwhile.
  double compile_ms = 0;
  double compile_wall_ms = 0;
};

// Facts of a whole kernel that decide how it compiles: computed once per
// compile (traits_of) and read by the lowering and by the code generator.
struct KernelTraits {
  // The most of kiln's own (inline, FMA-chain) float math functions that one
  // value passes through: 3 for sin(x) -> exp -> tanh, 1 for exp(x) + erf(x);
  // double math calls libm and counts 0.
  int math_chain_depth = 0;
  // Lanes of the vectors kiln asks the loop vectorizer for: 512 bits of the
  // kernel's widest element type (16 floats, 8 doubles).
  int vector_width = 16;
  // Depth 2 or more is latency-bound (docs/codegen.md, "Deep math"): its
  // element loops keep 8 vectors in flight (0: as LLVM sees fit) ...
  int element_loop_interleave = 0;
  // ... and its code generation runs without early machine LICM.
  bool early_machine_licm = true;
};

KernelTraits traits_of(const ir::Kernel& kernel);

// Compiles `kernel` into an object defining `symbol`. Throws
// std::runtime_error naming what LLVM rejected.
CompiledObject compile(const ir::Kernel& kernel, const std::string& symbol, const Options& options,
                       bool want_ir = false);

// Code loaded into the process. Unloads when destroyed.
class LoadedKernel {
 public:
  virtual ~LoadedKernel() = default;
  KernelFn fn = nullptr;
};

// Loads an object produced by compile() and resolves `symbol`. Throws
// std::runtime_error when the object is malformed or the symbol is missing.
std::unique_ptr<LoadedKernel> load(const std::string& object, const std::string& symbol);

}  // namespace kiln::codegen
