// Optimizing a kernel's LLVM IR for the host CPU, emitting a relocatable
// object, and loading objects through one process-wide ORC LLJIT.
//
// Compiling and loading are separate on purpose: a cached object is loaded
// without generating or optimizing IR again (≈0.3 ms instead of 5-60 ms).
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <stdexcept>

#include "codegen/lower_to_llvm.h"
#include "codegen/scale_by_power_of_two.h"
#include "codegen/streaming_stores.h"
#include "codegen/vector_math_library.h"
#include "kiln/codegen.h"

namespace kiln::codegen {
namespace {

// Bump when generated code changes for the same IR: old cached objects must
// not match. (build_identity(), a hash of the sources, also changes then.)
constexpr const char* kCodegenVersion = "kiln-codegen-7";

std::string error_text(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

// Through the option's own parser, as the command line would set it, so a
// future LLVM that changes the option's type fails here instead of corrupting it.
void set_bool_option(const char* name, bool value) {
  auto& options = llvm::cl::getRegisteredOptions();
  auto it = options.find(name);
  if (it == options.end() || it->second->addOccurrence(0, name, value ? "true" : "false")) {
    throw std::logic_error(std::string("kiln codegen: cannot set LLVM option ") + name);
  }
}

// Compile time is paid at a flush, so the pipeline drops what costs more than
// it gives kernels: loop strength reduction (x86 addressing modes do its
// job) and a vectorized epilogue for a run's last <16 elements
// (docs/codegen.md, "The pass pipeline"). This LLVM is kiln's private,
// statically linked copy, so its global options are kiln's alone.
void tune_pipeline_options() {
  set_bool_option("disable-lsr", true);
  set_bool_option("enable-epilogue-vectorization", false);
}

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    tune_pipeline_options();
  });
}

llvm::orc::JITTargetMachineBuilder host_builder() {
  init_llvm();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) throw std::runtime_error("kiln codegen: cannot detect the host target: " + error_text(jtmb.takeError()));
  jtmb->setRelocationModel(llvm::Reloc::PIC_);
  jtmb->setCodeModel(llvm::CodeModel::Small);
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
  return std::move(*jtmb);
}

// A TargetMachine is not thread-safe: one per compiling thread.
llvm::TargetMachine& thread_target_machine() {
  thread_local std::unique_ptr<llvm::TargetMachine> tm;
  if (!tm) {
    auto made = host_builder().createTargetMachine();
    if (!made)
      throw std::runtime_error("kiln codegen: cannot create a target machine: " + error_text(made.takeError()));
    tm = std::move(*made);
  }
  return *tm;
}

// The passes kernels need, instead of the whole O2 pipeline: promote the
// reduction accumulators, simplify, hoist what is loop-invariant (sizes,
// strides, scalars), canonicalize induction variables, vectorize, clean up.
// Kernels are one function with no calls to inline and no globals, so the
// rest of O2 (inlining, IPO, GVN, unrolling, SLP, the second simplification
// round) bought nothing measurable for half of the compile time
// (docs/codegen.md, "The pass pipeline").
// inject-tli-mappings marks libm calls that have a libmvec variant, which the
// vectorizer reads (without it every vector loop calls scalar libm).
// infer-alignment proves the vector stores of streaming kernels aligned
// (see mark_streaming_stores).
// (instcombine<no-verify-fixpoint>: a pipeline string's instcombine checks
// that one iteration reached a fixpoint and aborts the process when not, a
// test of LLVM itself; the O2 pipeline leaves it off too.)
constexpr const char* kPassPipeline =
    "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,loop-mssa(loop-rotate,licm),"
    "loop(indvars),inject-tli-mappings,loop-vectorize,infer-alignment,instcombine<no-verify-fixpoint>,simplifycfg)";

// KILN_OPT_LEVEL=3: kiln's pipeline, then what it leaves out of O3 that can
// still apply to one loop nest: GVN, SLP vectorization, unrolling. (LLVM's
// own default<O3> runs its loop passes before the vectorizer, which then
// leaves kiln's math loops scalar: 18x slower kernels.)
constexpr const char* kAggressivePassPipeline =
    "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,loop-mssa(loop-rotate,licm),"
    "loop(indvars),inject-tli-mappings,loop-vectorize,infer-alignment,gvn,instcombine<no-verify-fixpoint>,"
    "slp-vectorizer,loop-unroll<O3>,instcombine<no-verify-fixpoint>,simplifycfg)";

// The IR pipeline of each KILN_OPT_LEVEL: none, cleanup only, kiln's kernel
// pipeline, that and more.
const char* pass_pipeline(int opt_level) {
  switch (opt_level) {
    case 0: return "";
    case 1: return "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg)";
    case 3: return kAggressivePassPipeline;
    default: return kPassPipeline;
  }
}

llvm::CodeGenOptLevel code_generation_level(int opt_level) {
  switch (opt_level) {
    case 0: return llvm::CodeGenOptLevel::None;
    case 1: return llvm::CodeGenOptLevel::Less;
    case 3: return llvm::CodeGenOptLevel::Aggressive;
    default: return llvm::CodeGenOptLevel::Default;
  }
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm, int opt_level) {
  const char* pipeline = pass_pipeline(opt_level);
  if (!*pipeline) return;
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  // glibc's libmvec gives the vectorizer vector log/pow/atan/...: LLVM's
  // table for AVX2 widths, kiln's for AVX-512 (vector_math_library.cpp).
  llvm::TargetLibraryInfoImpl tlii(tm.getTargetTriple());
  tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86, tm.getTargetTriple());
  add_libmvec_avx512(tlii);
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  if (auto err = pb.parsePassPipeline(mpm, pipeline)) {
    throw std::logic_error("kiln codegen: bad pass pipeline: " + error_text(std::move(err)));
  }
  mpm.run(m, mam);
}

// The code generator's passes (instruction selection to object file) into
// `pm`, with early machine LICM as KernelTraits::early_machine_licm says:
// out of a deep-math kernel's loops it hoists more constants than there are
// registers, and the allocator spends its time evicting them
// (docs/codegen.md, "Deep math").
// The switch is LLVM's global option, read while the passes are added, so
// adding them is serialized (running them is not).
void add_code_generation_passes(llvm::legacy::PassManager& pm, llvm::raw_pwrite_stream& os, llvm::TargetMachine& tm,
                                bool early_machine_licm) {
  static std::mutex options_mutex;
  std::lock_guard<std::mutex> lock(options_mutex);
  set_bool_option("disable-machine-licm", !early_machine_licm);
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    throw std::runtime_error("kiln codegen: the target cannot emit object files");
  }
}

// The process-wide JIT. Kernels resolve libm (process symbols) and libmvec.
class Jit {
 public:
  static Jit& get() {
    static Jit* jit = new Jit();  // never destroyed: kernels may run during shutdown
    return *jit;
  }

  std::unique_ptr<LoadedKernel> load(const std::string& object, const std::string& symbol) {
    auto jd = lljit_->createJITDylib(symbol + "#" + std::to_string(counter_.fetch_add(1)));
    if (!jd) throw std::runtime_error("kiln codegen: " + error_text(jd.takeError()));
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, symbol);
    if (auto err = lljit_->addObjectFile(*jd, std::move(buffer))) {
      throw std::runtime_error("kiln codegen: cannot load the object of " + symbol + ": " + error_text(std::move(err)));
    }
    auto addr = lljit_->lookup(*jd, symbol);
    if (!addr) {
      auto err = addr.takeError();
      (void)lljit_->getExecutionSession().removeJITDylib(*jd);
      throw std::runtime_error("kiln codegen: " + symbol + " not found in its object: " + error_text(std::move(err)));
    }
    auto loaded = std::make_unique<Loaded>(*lljit_, *jd);
    loaded->fn = addr->toPtr<KernelFn>();
    return loaded;
  }

 private:
  struct Loaded : LoadedKernel {
    Loaded(llvm::orc::LLJIT& j, llvm::orc::JITDylib& d) : jit(j), jd(d) {}
    ~Loaded() override { llvm::consumeError(jit.getExecutionSession().removeJITDylib(jd)); }
    llvm::orc::LLJIT& jit;
    llvm::orc::JITDylib& jd;
  };

  Jit() {
    auto made = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(host_builder()).create();
    if (!made) throw std::runtime_error("kiln codegen: cannot create the JIT: " + error_text(made.takeError()));
    lljit_ = std::move(*made);
    const char prefix = lljit_->getDataLayout().getGlobalPrefix();
    auto mvec = llvm::orc::DynamicLibrarySearchGenerator::Load("libmvec.so.1", prefix);
    if (mvec) lljit_->getProcessSymbolsJITDylib()->addGenerator(std::move(*mvec));
    else llvm::consumeError(mvec.takeError());  // no libmvec: the vectorizer's calls fail to link, caught at load
  }

  std::unique_ptr<llvm::orc::LLJIT> lljit_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

std::string environment_fingerprint(const Options& options) {
  init_llvm();
  std::string features;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) {
    if (f.second) features += "+" + f.first().str() + ",";
  }
  return std::string(kCodegenVersion) + ";build=" + build_identity() +
         ";llvm=" LLVM_VERSION_STRING ";triple=" + llvm::sys::getProcessTriple() +
         ";cpu=" + llvm::sys::getHostCPUName().str() + ";features=" + features +
         ";fast_math=" + (options.fast_math ? "1" : "0") + ";avx512_math=" + (options.avx512_math ? "1" : "0") +
         ";opt_level=" + std::to_string(options.opt_level) + ";opt=" + pass_pipeline(options.opt_level) + ";" +
         libmvec_fingerprint();
}

namespace {

// CPU time of the calling thread, in ms.
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

}  // namespace

CompiledObject compile(const ir::Kernel& kernel, const std::string& symbol, const Options& options, bool want_ir) {
  const auto start = std::chrono::steady_clock::now();
  const double start_cpu_ms = thread_cpu_ms();
  llvm::TargetMachine& tm = thread_target_machine();
  tm.setOptLevel(code_generation_level(options.opt_level));
  llvm::LLVMContext ctx;
  // Remarks ("loop not vectorized" where a width hint cannot apply, as in a
  // loop calling libm's erfcf) are expected and dropped instead of printed;
  // errors are kept and thrown after the stage that reported them (never
  // thrown through LLVM's frames).
  std::string llvm_error;
  ctx.setDiagnosticHandlerCallBack(
      [](const llvm::DiagnosticInfo* info, void* context) {
        if (info->getSeverity() != llvm::DS_Error) return;
        llvm::raw_string_ostream os(*static_cast<std::string*>(context));
        llvm::DiagnosticPrinterRawOStream printer(os);
        info->print(printer);
        os << "; ";
      },
      &llvm_error);
  auto check = [&](const char* stage) {
    if (!llvm_error.empty())
      throw std::runtime_error(std::string("kiln codegen: LLVM error while ") + stage + ": " + llvm_error);
  };
  llvm::Module module(symbol, ctx);
  module.setDataLayout(tm.createDataLayout());
  module.setTargetTriple(tm.getTargetTriple().str());
  const KernelTraits traits = traits_of(kernel);
  lower_to_llvm(kernel, traits, symbol, module, options);
  optimize(module, tm, options.opt_level);
  lower_scale_calls(module);
  if (kernel.streaming_stores) mark_streaming_stores(module);
  check("optimizing");
  CompiledObject out;
  if (want_ir) {
    llvm::raw_string_ostream os(out.llvm_ir);
    module.print(os, nullptr);
  }
  llvm::SmallVector<char, 0> bytes;
  llvm::raw_svector_ostream os(bytes);
  llvm::legacy::PassManager pm;
  add_code_generation_passes(pm, os, tm, traits.early_machine_licm);
  pm.run(module);
  check("emitting code");
  out.object.assign(bytes.begin(), bytes.end());
  out.compile_ms = thread_cpu_ms() - start_cpu_ms;
  out.compile_wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::unique_ptr<LoadedKernel> load(const std::string& object, const std::string& symbol) {
  return Jit::get().load(object, symbol);
}

}  // namespace kiln::codegen
