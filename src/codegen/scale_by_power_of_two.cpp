#include "codegen/scale_by_power_of_two.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

#include <string>
#include <vector>

#include "codegen/vector_math_library.h"

namespace kiln::codegen {
namespace {

constexpr const char* kScalarName = "kiln_scalef";
constexpr unsigned kLanes[] = {4, 8, 16};  // the float vectors AVX-512 VL has
constexpr int kCurrentRounding = 4;        // _MM_FROUND_CUR_DIRECTION

std::string vector_name(unsigned lanes) { return std::string(kScalarName) + "_v" + std::to_string(lanes); }

llvm::Function* declare(llvm::Module& m, const std::string& name, llvm::Type* ty) {
  auto* f =
      llvm::cast<llvm::Function>(m.getOrInsertFunction(name, llvm::FunctionType::get(ty, {ty, ty}, false)).getCallee());
  f->setDoesNotAccessMemory();
  f->setDoesNotThrow();
  f->setWillReturn();
  return f;
}

// vscalef of one call's operands, as the x86 intrinsic of its width.
llvm::Value* vscalef(llvm::IRBuilderBase& b, llvm::Value* p, llvm::Value* n) {
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  auto* vty = llvm::dyn_cast<llvm::FixedVectorType>(p->getType());
  auto call = [&](llvm::Intrinsic::ID id, std::vector<llvm::Value*> args) {
    return b.CreateCall(llvm::Intrinsic::getDeclaration(&m, id), args);
  };
  if (vty == nullptr) {  // scalar: lane 0 of vscalefss
    auto* v4 = llvm::FixedVectorType::get(p->getType(), 4);
    llvm::Value* zero = llvm::Constant::getNullValue(v4);
    llvm::Value* r = call(llvm::Intrinsic::x86_avx512_mask_scalef_ss,
                          {b.CreateInsertElement(zero, p, uint64_t{0}), b.CreateInsertElement(zero, n, uint64_t{0}),
                           zero, b.getInt8(0xff), b.getInt32(kCurrentRounding)});
    return b.CreateExtractElement(r, uint64_t{0});
  }
  llvm::Value* zero = llvm::Constant::getNullValue(vty);
  switch (vty->getNumElements()) {
    case 16:
      return call(llvm::Intrinsic::x86_avx512_mask_scalef_ps_512,
                  {p, n, zero, b.getInt16(0xffff), b.getInt32(kCurrentRounding)});
    case 8: return call(llvm::Intrinsic::x86_avx512_mask_scalef_ps_256, {p, n, zero, b.getInt8(0xff)});
    default: return call(llvm::Intrinsic::x86_avx512_mask_scalef_ps_128, {p, n, zero, b.getInt8(0xff)});
  }
}

}  // namespace

bool vscalef_available() {
  static const bool available = host_has_cpu_feature("avx512f") && host_has_cpu_feature("avx512vl");
  return available;
}

llvm::Value* emit_scale_by_power_of_two(llvm::IRBuilderBase& b, llvm::Value* p, llvm::Value* n) {
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  llvm::Type* f32 = b.getFloatTy();
  llvm::Function* scalar = declare(m, kScalarName, f32);
  std::string variants;
  for (unsigned lanes : kLanes) {
    declare(m, vector_name(lanes), llvm::FixedVectorType::get(f32, lanes));
    if (!variants.empty()) variants += ",";
    variants += "_ZGV_LLVM_N" + std::to_string(lanes) + "vv_" + kScalarName + "(" + vector_name(lanes) + ")";
  }
  llvm::CallInst* call = b.CreateCall(scalar, {p, n});
  call->addFnAttr(llvm::Attribute::get(b.getContext(), "vector-function-abi-variant", variants));
  return call;
}

void lower_scale_calls(llvm::Module& module) {
  std::vector<std::string> names{kScalarName};
  for (unsigned lanes : kLanes) names.push_back(vector_name(lanes));
  for (const std::string& name : names) {
    llvm::Function* f = module.getFunction(name);
    if (f == nullptr) continue;
    std::vector<llvm::CallInst*> calls;
    for (llvm::User* u : f->users()) calls.push_back(llvm::cast<llvm::CallInst>(u));
    for (llvm::CallInst* c : calls) {
      llvm::IRBuilder<> b(c);
      c->replaceAllUsesWith(vscalef(b, c->getArgOperand(0), c->getArgOperand(1)));
      c->eraseFromParent();
    }
    f->eraseFromParent();
  }
}

}  // namespace kiln::codegen
