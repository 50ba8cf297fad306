#include "codegen/llvm_calls.h"

#include <llvm/IR/Module.h>

#include <string>
#include <vector>

namespace kiln::codegen {

llvm::Value* call_intrinsic(llvm::IRBuilderBase& b, llvm::Intrinsic::ID id, std::initializer_list<llvm::Value*> args) {
  llvm::Module* m = b.GetInsertBlock()->getModule();
  auto* decl = llvm::Intrinsic::getDeclaration(m, id, {(*args.begin())->getType()});
  return b.CreateCall(decl, llvm::ArrayRef<llvm::Value*>(args.begin(), args.size()));
}

// Declared as not touching memory: kernels never read errno.
llvm::Value* call_libm(llvm::IRBuilderBase& b, const char* name, std::initializer_list<llvm::Value*> args) {
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  llvm::Type* ty = (*args.begin())->getType();
  std::string fname = ty->isFloatTy() ? std::string(name) + "f" : std::string(name);
  std::vector<llvm::Type*> params(args.size(), ty);
  auto callee = m.getOrInsertFunction(fname, llvm::FunctionType::get(ty, params, false));
  if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    f->setDoesNotAccessMemory();
    f->setDoesNotThrow();
    f->addFnAttr(llvm::Attribute::WillReturn);
  }
  auto* call = b.CreateCall(callee, llvm::ArrayRef<llvm::Value*>(args.begin(), args.size()));
  call->setDoesNotAccessMemory();
  return call;
}

}  // namespace kiln::codegen
