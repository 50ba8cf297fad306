// LLVM 19's LIBMVEC_X86 table stops at AVX2 (4 doubles, 8 floats), and
// kernels are vectorized 512 bits wide, so without these a vector loop calls
// scalar logf 16 times per vector. glibc has had the AVX-512 variants
// (_ZGVeN16v_logf, ...) since 2.22, more of them since 2.35; each is mapped
// only if this process's libmvec exports it. kiln's own float exp, sin, cos,
// tanh and erf are inline code and never reach these.
#include "codegen/vector_math_library.h"

#include <dlfcn.h>

#include <llvm/TargetParser/Host.h>

#include <mutex>
#include <vector>

namespace kiln::codegen {
namespace {

struct Mapping {
  std::string scalar, vector, abi_prefix;
  unsigned lanes;
};

// libm names (float forms end in f) and how many arguments they take; those
// with an LLVM intrinsic are mapped under the intrinsic's name too.
struct Function {
  const char* name;
  int args;
  bool intrinsic;
};
constexpr Function kFunctions[] = {
    {"exp", 1, true},    {"exp2", 1, true},  {"log", 1, true},    {"log2", 1, true},   {"log10", 1, true},
    {"sin", 1, true},    {"cos", 1, true},   {"tan", 1, true},    {"pow", 2, true},    {"expm1", 1, false},
    {"log1p", 1, false}, {"sinh", 1, false}, {"cosh", 1, false},  {"tanh", 1, false},  {"asin", 1, false},
    {"acos", 1, false},  {"atan", 1, false}, {"asinh", 1, false}, {"acosh", 1, false}, {"atanh", 1, false},
    {"erf", 1, false},   {"erfc", 1, false}, {"atan2", 2, false},
};

const std::vector<Mapping>& mappings() {
  static std::vector<Mapping> found;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!host_has_cpu_feature("avx512f")) return;
    void* mvec = dlopen("libmvec.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (mvec == nullptr) return;
    for (const Function& f : kFunctions) {
      for (bool single : {true, false}) {
        const unsigned lanes = single ? 16 : 8;
        const std::string scalar = std::string(f.name) + (single ? "f" : "");
        const std::string v(f.args, 'v');
        const std::string vector = "_ZGVeN" + std::to_string(lanes) + v + "_" + scalar;
        if (dlsym(mvec, vector.c_str()) == nullptr) continue;
        const std::string prefix = "_ZGV_LLVM_N" + std::to_string(lanes) + v;
        found.push_back({scalar, vector, prefix, lanes});
        if (f.intrinsic)
          found.push_back({std::string("llvm.") + f.name + (single ? ".f32" : ".f64"), vector, prefix, lanes});
      }
    }
    // The handle stays open: the JIT resolves these symbols later.
  });
  return found;
}

}  // namespace

bool host_has_cpu_feature(const std::string& name) {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  auto it = features.find(name);
  return it != features.end() && it->second;
}

void add_libmvec_avx512(llvm::TargetLibraryInfoImpl& tlii) {
  std::vector<llvm::VecDesc> descs;
  for (const Mapping& m : mappings()) {
    descs.emplace_back(m.scalar, m.vector, llvm::ElementCount::getFixed(m.lanes), false, m.abi_prefix);
  }
  tlii.addVectorizableFunctions(descs);
}

std::string libmvec_fingerprint() { return "libmvec=" + std::to_string(mappings().size()); }

}  // namespace kiln::codegen
