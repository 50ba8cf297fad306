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
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>

#include "codegen/lower_to_llvm.h"
#include "kiln/codegen.h"

namespace kiln::codegen {
namespace {

// Bump when generated code changes for the same IR: old cached objects must not match.
constexpr const char* kCodegenVersion = "kiln-codegen-1";

std::string error_text(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
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
    if (!made) throw std::runtime_error("kiln codegen: cannot create a target machine: " + error_text(made.takeError()));
    tm = std::move(*made);
  }
  return *tm;
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;  // off by default in PassBuilder; clang turns it on for -O2
  llvm::PassBuilder pb(&tm, pto);
  // glibc's libmvec gives the vectorizer vector exp/log/sin/cos/pow.
  llvm::TargetLibraryInfoImpl tlii(tm.getTargetTriple());
  tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86, tm.getTargetTriple());
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  mpm.run(m, mam);
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
  return std::string(kCodegenVersion) + ";llvm=" LLVM_VERSION_STRING ";triple=" + llvm::sys::getProcessTriple() +
         ";cpu=" + llvm::sys::getHostCPUName().str() + ";features=" + features +
         ";fast_math=" + (options.fast_math ? "1" : "0") + ";opt=O2";
}

CompiledObject compile(const ir::Kernel& kernel, const std::string& symbol, const Options& options, bool want_ir) {
  const auto start = std::chrono::steady_clock::now();
  llvm::TargetMachine& tm = thread_target_machine();
  llvm::LLVMContext ctx;
  llvm::Module module(symbol, ctx);
  module.setDataLayout(tm.createDataLayout());
  module.setTargetTriple(tm.getTargetTriple().str());
  lower_to_llvm(kernel, symbol, module, options.fast_math);
  optimize(module, tm);
  CompiledObject out;
  if (want_ir) {
    llvm::raw_string_ostream os(out.llvm_ir);
    module.print(os, nullptr);
  }
  llvm::SmallVector<char, 0> bytes;
  llvm::raw_svector_ostream os(bytes);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    throw std::runtime_error("kiln codegen: the target cannot emit object files");
  }
  pm.run(module);
  out.object.assign(bytes.begin(), bytes.end());
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::unique_ptr<LoadedKernel> load(const std::string& object, const std::string& symbol) {
  return Jit::get().load(object, symbol);
}

}  // namespace kiln::codegen
