// p * 2^n in one AVX-512 instruction (vscalefps) for kiln's own float math,
// through a call the loop vectorizer widens. LLVM 19 cannot widen its own
// llvm.ldexp (a vector loop would call ldexpf once per lane), and x86
// intrinsics are vector-only, so kernels call kiln_scalef, which names its
// 4-, 8- and 16-lane variants; once the loops are vectorized,
// lower_scale_calls turns every call, scalar or vector, into vscalefss/ps.
#pragma once

namespace llvm {
class IRBuilderBase;
class Module;
class Value;
}  // namespace llvm

namespace kiln::codegen {

// Whether the host has what emit_scale_by_power_of_two needs (AVX-512 F and VL).
bool vscalef_available();

// p * 2^n for float p and n, n a whole number: one rounding, so subnormal
// and overflowing results come out right; NaN in either gives NaN. Only
// where vscalef_available(); the module needs lower_scale_calls before code
// generation.
llvm::Value* emit_scale_by_power_of_two(llvm::IRBuilderBase& b, llvm::Value* p, llvm::Value* n);

// After optimization: replaces every kiln_scalef call and its vector
// variants by vscalefps/vscalefss, and removes their declarations.
void lower_scale_calls(llvm::Module& module);

}  // namespace kiln::codegen
