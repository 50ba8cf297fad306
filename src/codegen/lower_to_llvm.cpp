// Kernel IR -> LLVM IR. One function per kernel, with the KernelFn signature.
//
// Values live in registers as: bool i1, integers iN, float16/bfloat16 as
// their i16 bits (rounded after every op, as eager rounds every op's result),
// float32/float64 natively. Memory is addressed by element offsets computed
// from the runtime sizes and strides; an access whose innermost stride is 1
// or 0 is specialized so that the loop vectorizer sees consecutive or uniform
// loads. The optimizer cleans up what is emitted plainly here (allocas for
// accumulators, loop-invariant row values).
#include "codegen/lower_to_llvm.h"
#include "codegen/scale_by_power_of_two.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::Op;
using llvm::Value;

}  // namespace

int math_chain_depth(const ir::Kernel& k) {
  // depth[i]: the most of kiln's own math functions on one path into node i.
  std::vector<int> depth(k.nodes.size(), 0);
  int deepest = 0;
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const ir::Node& n = k.nodes[i];
    for (int32_t in : n.in) {
      if (in >= 0) depth[i] = std::max(depth[i], depth[in]);
    }
    switch (n.op) {
      case Op::Exp: case Op::Sin: case Op::Cos: case Op::Tanh: case Op::Erf: case Op::Sigmoid:
        depth[i] += n.dtype == DType::Float64 ? 0 : 1;  // double math calls libm
        break;
      default: break;
    }
    deepest = std::max(deepest, depth[i]);
  }
  return deepest;
}

bool has_deep_math(const ir::Kernel& k) { return math_chain_depth(k) >= 2; }

namespace {

class Lowering {
 public:
  Lowering(const ir::Kernel& k, llvm::Module& m, const Options& options)
      : k_(k), m_(m), ctx_(m.getContext()), b_(ctx_), fast_math_(options.fast_math),
        vscalef_(options.avx512_math && vscalef_available()), deep_math_(has_deep_math(k)) {
    i64_ = b_.getInt64Ty();
  }

  void emit(const std::string& symbol) {
    ir::validate(k_);
    auto* ptr = b_.getPtrTy();
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, i64_, i64_}, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    // LLVM's tuning for recent AVX-512 cores prefers 256-bit vectors (clock
    // throttling on server parts); kernels are throughput loops, take 512.
    fn_->addFnAttr("prefer-vector-width", "512");
    // Divisions marked arcp (reciprocal_estimate_div; every one under
    // KILN_FAST_MATH) become a reciprocal estimate and Newton-Raphson steps:
    // one from AVX-512's 14-bit vector estimate, two from the 12-bit scalar
    // one (rcpss), so a loop's remainder is as accurate as its vector body.
    fn_->addFnAttr("reciprocal-estimates", "divf:2,vec-divf:1");
    auto args = fn_->arg_begin();
    Value* bufs = &*args++;
    ints_ = &*args++;
    scalars_ = &*args++;
    Value* begin = &*args++;
    Value* end = &*args++;
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry);
    if (fast_math_) {
      llvm::FastMathFlags f;
      f.setFast();
      b_.setFastMathFlags(f);
    }
    for (int i = 0; i < k_.num_buffers; ++i) {
      base_.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, bufs, i), "buf" + std::to_string(i)));
    }
    for (int d = 0; d < k_.rank; ++d) sizes_.push_back(int_arg(k_.size_index(d)));
    for (size_t a = 0; a < k_.accesses.size(); ++a) {
      offsets_.push_back(int_arg(k_.offset_index(static_cast<int>(a))));
      std::vector<Value*> s;
      for (int d = 0; d < k_.rank; ++d) s.push_back(stride(static_cast<int>(a), d));
      strides_.push_back(s);
    }
    row_level_ = ir::row_level_nodes(k_);
    make_alias_scopes();
    if (k_.reduce_rank == 0) emit_pointwise(begin, end);
    else emit_rows(begin, end);
    b_.CreateRetVoid();
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyFunction(*fn_, &os)) throw std::runtime_error("kiln codegen produced invalid LLVM IR: " + os.str());
  }

 private:
  // Per loop body: element offset of every access and the values already
  // computed there.
  struct Scope {
    std::vector<Value*> offset;  // per access (null: not addressable here)
    std::vector<Value*> memo;
    std::vector<Value*> base;    // per access: what offset counts from (null: its buffer's start)
  };

  Value* int_arg(int i) { return launch_arg(i64_, ints_, i); }

  // The launch's ints and scalars never change while a kernel runs. Saying
  // so lets LLVM hoist a scalar read inside a loop and keeps the vectorizer
  // from guarding the loop with runtime overlap checks against the stores
  // (and a scalar copy of the loop for when they fail).
  Value* launch_arg(llvm::Type* ty, Value* array, int i) {
    auto* load = b_.CreateLoad(ty, b_.CreateConstInBoundsGEP1_64(ty, array, i));
    load->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
    return load;
  }
  // Innermost strides the IR fixes are constants, so the vectorizer sees them.
  Value* stride(int a, int d) {
    if (d == k_.rank - 1) {
      if (k_.accesses[a].inner == ir::Inner::Contiguous) return b_.getInt64(1);
      if (k_.accesses[a].inner == ir::Inner::Broadcast) return b_.getInt64(0);
    }
    return int_arg(k_.stride_index(a, d));
  }

  llvm::Type* reg_type(DType t) {
    switch (t) {
      case DType::Bool: return b_.getInt1Ty();
      case DType::UInt8:
      case DType::Int8: return b_.getInt8Ty();
      case DType::Int16:
      case DType::Float16:
      case DType::BFloat16: return b_.getInt16Ty();
      case DType::Int32: return b_.getInt32Ty();
      case DType::Int64: return i64_;
      case DType::Float32: return b_.getFloatTy();
      case DType::Float64: return b_.getDoubleTy();
    }
    return nullptr;
  }
  llvm::Type* mem_type(DType t) { return t == DType::Bool ? b_.getInt8Ty() : reg_type(t); }
  static bool is_int(DType t) { return !ir::is_floating(t); }
  static bool is_unsigned(DType t) { return t == DType::UInt8 || t == DType::Bool; }

  // ------------------------------------------------------------ conversions

  Value* to_f32(Value* v, DType from) {  // reduced float bits -> float
    if (from == DType::BFloat16) {
      Value* wide = b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16);
      return b_.CreateBitCast(wide, b_.getFloatTy());
    }
    return b_.CreateFPExt(b_.CreateBitCast(v, b_.getHalfTy()), b_.getFloatTy());
  }
  Value* from_f32(Value* f, DType to) {  // float -> reduced float bits, round to nearest even
    if (to == DType::Float16) return b_.CreateBitCast(b_.CreateFPTrunc(f, b_.getHalfTy()), b_.getInt16Ty());
    Value* u = b_.CreateBitCast(f, b_.getInt32Ty());
    Value* lsb = b_.CreateAnd(b_.CreateLShr(u, 16), 1);
    Value* rounded = b_.CreateLShr(b_.CreateAdd(u, b_.CreateAdd(lsb, b_.getInt32(0x7fff))), 16);
    Value* bits = b_.CreateTrunc(rounded, b_.getInt16Ty());
    return b_.CreateSelect(b_.CreateFCmpUNO(f, f), b_.getInt16(0x7fc0), bits);
  }

  Value* cast(Value* v, DType from, DType to) {
    if (from == to) return v;
    if (ir::is_reduced_float(from)) return cast(to_f32(v, from), DType::Float32, to);
    if (ir::is_reduced_float(to)) {
      // eager converts through float (c10::BFloat16(float), c10::Half(float))
      return from_f32(cast(v, from, DType::Float32), to);
    }
    llvm::Type* ty = reg_type(to);
    if (to == DType::Bool) {
      if (ir::is_floating(from)) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
      return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    }
    if (ir::is_floating(from) && ir::is_floating(to)) return b_.CreateFPCast(v, ty);
    if (ir::is_floating(to)) return is_unsigned(from) ? b_.CreateUIToFP(v, ty) : b_.CreateSIToFP(v, ty);
    if (ir::is_floating(from)) {
      // C++ static_cast as eager's kernels do it: through a wider signed integer.
      if (to == DType::Int64 || to == DType::Int32) return b_.CreateFPToSI(v, ty);
      if (to == DType::UInt8) return b_.CreateTrunc(b_.CreateFPToSI(v, i64_), ty);
      return b_.CreateTrunc(b_.CreateFPToSI(v, b_.getInt32Ty()), ty);
    }
    return is_unsigned(from) ? b_.CreateZExtOrTrunc(v, ty) : b_.CreateSExtOrTrunc(v, ty);
  }

  // ------------------------------------------------------------ math

  Value* intrinsic(llvm::Intrinsic::ID id, std::initializer_list<Value*> args) {
    auto* decl = llvm::Intrinsic::getDeclaration(&m_, id, {(*args.begin())->getType()});
    return b_.CreateCall(decl, llvm::ArrayRef<Value*>(args.begin(), args.size()));
  }
  // A libm function with no intrinsic (tanh, expm1, erf, ...). Declared as not
  // touching memory: kernels never read errno.
  Value* libm(const char* name, std::initializer_list<Value*> args) {
    llvm::Type* ty = (*args.begin())->getType();
    std::string fname = ty->isFloatTy() ? std::string(name) + "f" : std::string(name);
    std::vector<llvm::Type*> params(args.size(), ty);
    auto callee = m_.getOrInsertFunction(fname, llvm::FunctionType::get(ty, params, false));
    if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
      f->setDoesNotAccessMemory();
      f->setDoesNotThrow();
      f->addFnAttr(llvm::Attribute::WillReturn);
    }
    auto* call = b_.CreateCall(callee, llvm::ArrayRef<Value*>(args.begin(), args.size()));
    call->setDoesNotAccessMemory();
    return call;
  }
  Value* fconst(llvm::Type* ty, double v) { return llvm::ConstantFP::get(ty, v); }

  Value* unary(Op op, Value* x, DType t) {
    llvm::Type* ty = x->getType();
    const bool f = ir::is_floating(t);
    using I = llvm::Intrinsic::ID;
    switch (op) {
      case Op::Neg: return f ? b_.CreateFNeg(x) : b_.CreateNeg(x);
      case Op::Abs:
        if (f) return intrinsic(llvm::Intrinsic::fabs, {x});
        if (is_unsigned(t)) return x;
        return intrinsic(llvm::Intrinsic::abs, {x, b_.getFalse()});
      case Op::Not: return b_.CreateNot(t == DType::Bool ? x : b_.CreateICmpNE(x, llvm::ConstantInt::get(ty, 0)));
      case Op::BitNot: return b_.CreateNot(x);
      case Op::Floor: return f ? intrinsic(llvm::Intrinsic::floor, {x}) : x;
      case Op::Ceil: return f ? intrinsic(llvm::Intrinsic::ceil, {x}) : x;
      case Op::Round: return f ? intrinsic(llvm::Intrinsic::roundeven, {x}) : x;
      case Op::Trunc: return f ? intrinsic(llvm::Intrinsic::trunc, {x}) : x;
      case Op::IsNan: return f ? b_.CreateFCmpUNO(x, x) : b_.getFalse();
      case Op::IsInf:
        return f ? b_.CreateFCmpOEQ(intrinsic(llvm::Intrinsic::fabs, {x}),
                                    fconst(ty, std::numeric_limits<double>::infinity()))
                 : b_.getFalse();
      case Op::Sign: {
        if (t == DType::Bool) return x;
        Value* zero = f ? fconst(ty, 0) : llvm::ConstantInt::get(ty, 0);
        Value* pos = f ? b_.CreateFCmpOLT(zero, x) : (is_unsigned(t) ? b_.CreateICmpULT(zero, x) : b_.CreateICmpSLT(zero, x));
        Value* neg = f ? b_.CreateFCmpOLT(x, zero) : (is_unsigned(t) ? b_.getFalse() : b_.CreateICmpSLT(x, zero));
        if (f) return b_.CreateFSub(b_.CreateUIToFP(pos, ty), b_.CreateUIToFP(neg, ty));
        return b_.CreateSub(b_.CreateZExt(pos, ty), b_.CreateZExt(neg, ty));
      }
      default: break;
    }
    if (!f) throw std::runtime_error(std::string("kiln codegen: ") + ir::op_name(op) + " on " + ir::dtype_name(t));
    I id = llvm::Intrinsic::not_intrinsic;
    switch (op) {
      case Op::Exp: return exp_value(x);
      case Op::Exp2: id = llvm::Intrinsic::exp2; break;
      case Op::Log: id = llvm::Intrinsic::log; break;
      case Op::Log2: id = llvm::Intrinsic::log2; break;
      case Op::Log10: id = llvm::Intrinsic::log10; break;
      case Op::Sqrt: id = llvm::Intrinsic::sqrt; break;
      case Op::Sin: id = llvm::Intrinsic::sin; break;
      case Op::Cos: id = llvm::Intrinsic::cos; break;
      case Op::Tan: id = llvm::Intrinsic::tan; break;
      default: break;
    }
    if (id == llvm::Intrinsic::sin && ty->isFloatTy()) {
      // sin(-0) is -0; the reduction's parts of pi/2 of either sign turn
      // -0 into +0 (-0 + +0), so zeros pass through.
      return b_.CreateSelect(b_.CreateFCmpOEQ(x, fconst(ty, 0)), x, sincos_f32(x, false));
    }
    if (id == llvm::Intrinsic::cos && ty->isFloatTy()) return sincos_f32(x, true);
    if (id != llvm::Intrinsic::not_intrinsic) return intrinsic(id, {x});
    switch (op) {
      case Op::Rsqrt: return b_.CreateFDiv(fconst(ty, 1), intrinsic(llvm::Intrinsic::sqrt, {x}));
      case Op::Reciprocal: return b_.CreateFDiv(fconst(ty, 1), x);
      case Op::Sigmoid:
        return b_.CreateFDiv(fconst(ty, 1), b_.CreateFAdd(fconst(ty, 1), exp_value(b_.CreateFNeg(x))));
      case Op::Tanh:
        if (ty->isFloatTy()) return tanh_f32(x);
        return libm("tanh", {x});
      case Op::Erf:
        if (ty->isFloatTy()) return erf_f32(x);
        return libm("erf", {x});
      case Op::Expm1: return libm("expm1", {x});
      case Op::Log1p: return libm("log1p", {x});
      case Op::Sinh:
      case Op::Cosh: return sinh_cosh(x, op == Op::Cosh);
      case Op::Asin: return libm("asin", {x});
      case Op::Acos: return libm("acos", {x});
      case Op::Atan: return libm("atan", {x});
      case Op::Asinh: return libm("asinh", {x});
      case Op::Acosh: return libm("acosh", {x});
      case Op::Atanh: return libm("atanh", {x});
      case Op::Erfc: return libm("erfc", {x});
      default: break;
    }
    throw std::runtime_error(std::string("kiln codegen: no lowering for ") + ir::op_name(op));
  }

  // e^x wherever a lowering needs it (exp, sigmoid, erf). For float, kiln's
  // own: LLVM expands a vector llvm.exp.f32 into one expf call per lane.
  Value* exp_value(Value* x) {
    return x->getType()->isFloatTy() ? exp_f32(x) : intrinsic(llvm::Intrinsic::exp, {x});
  }

  // a * b + c for polynomial evaluation inside kiln's own math functions
  // (never for eager's ops): one instruction where the CPU has FMA.
  Value* muladd(Value* a, Value* b, Value* c) { return intrinsic(llvm::Intrinsic::fmuladd, {a, b, c}); }

  // Adding 1.5 * 2^23 to a float of magnitude below 2^22 rounds it to an
  // integer (to nearest even) that lands in the low mantissa bits.
  static constexpr double kRoundMagic = 12582912.0;
  static constexpr double kInvPi = 0.318309886183790671538;
  static constexpr double kSmallSinLimit = 65536;  // float-only sin/cos reduction up to here
  // As the bits of a float: a magnitude's bits compare as the magnitude does.
  static constexpr uint32_t kSmallSinLimitBits = std::bit_cast<uint32_t>(static_cast<float>(kSmallSinLimit));

  // float32 exp, sin, cos, tanh and erf are straight-line code: loops that use
  // them vectorize on any CPU, and here they beat libmvec's AVX-512 variants
  // (the benchmark chain with libmvec's exp, sin and tanh: 6.9 against kiln's
  // 5.0 us per 4096 elements, one thread, before this file's later speedups).

  // a / b from the CPU's reciprocal estimate refined by Newton-Raphson (see
  // the attribute set in emit()): within 1 ulp of a / b, not always the
  // correctly rounded quotient. For kiln's own math only, where b is finite
  // and not zero. A vector division holds the divider for many cycles: the
  // benchmark chain ran 20% faster with tanh's division estimated (one
  // thread, in L1: 3.8 -> 3.0 us per 4096 elements).
  Value* reciprocal_estimate_div(Value* a, Value* b) {
    auto* div = llvm::cast<llvm::Instruction>(b_.CreateFDiv(a, b));
    llvm::FastMathFlags flags;
    flags.setAllowReciprocal();
    flags.setNoInfs();
    flags.setAllowContract();
    div->setFastMathFlags(flags);
    return div;
  }

  // Eigen's rational tanh (generic_fast_tanh_float), as x * (p / q): the
  // ratio is near 1 for tiny x, so tiny and subnormal x need no special
  // case (Eigen's (x p) / q does). Within 5 ulp. x is clamped to
  // +-kTanhSaturation, the smallest float at which this rational (as
  // evaluated here, FMAs and estimated division) is exactly 1: beyond it
  // tanh is +-1 exactly, as in libm, for two min/max instead of a compare,
  // a copysign and a select. A NaN x stays NaN (the clamps pass it).
  static constexpr double kTanhSaturation = 7.932197093963623;  // a float: 0x1.fba91ep+2
  Value* tanh_f32(Value* x) {
    llvm::Type* ty = x->getType();
    auto k = [&](double v) { return fconst(ty, v); };
    x = b_.CreateSelect(b_.CreateFCmpOGT(x, k(kTanhSaturation)), k(kTanhSaturation), x);
    x = b_.CreateSelect(b_.CreateFCmpOLT(x, k(-kTanhSaturation)), k(-kTanhSaturation), x);
    Value* x2 = b_.CreateFMul(x, x);
    Value* p = k(-2.76076847742355e-16);
    for (double a : {2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08, 1.48572235717979e-05,
                     6.37261928875436e-04, 4.89352455891786e-03}) {
      p = muladd(x2, p, k(a));
    }
    Value* q = k(1.19825839466702e-06);
    for (double c : {1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03}) {
      q = muladd(x2, q, k(c));
    }
    return b_.CreateFMul(x, reciprocal_estimate_div(p, q));
  }

  // expf as Cephes reduces it: n = round(x / ln2), r = x - n ln2 in two
  // parts, e^r by a degree-6 polynomial in Horner form (a minimax fit kiln
  // made for this range; 0.9 ulp), times 2^n. About 1 ulp over the whole
  // range; AVX-512 wide. n is rounded by adding 1.5 * 2^23 inside the FMA.
  // With AVX-512, one vscalefps multiplies by 2^n (5 fewer instructions per
  // vector than the portable scaling: the benchmark chain's exp is a third
  // of its math).
  Value* exp_f32(Value* x) {
    llvm::Type* ty = x->getType();
    auto k = [&](double v) { return fconst(ty, v); };
    Value* xc = b_.CreateSelect(b_.CreateFCmpOGT(x, k(89.0)), k(89.0), x);
    xc = b_.CreateSelect(b_.CreateFCmpOLT(xc, k(-104.0)), k(-104.0), xc);  // NaN passes through
    const double magic = vscalef_ ? kRoundMagic : kRoundMagic + 254;
    Value* t = intrinsic(llvm::Intrinsic::fma, {xc, k(1.44269504088896341), k(magic)});
    Value* n = b_.CreateFSub(t, k(magic));
    Value* r = muladd(n, k(2.12194440e-4), muladd(n, k(-0.693359375), xc));
    Value* p = k(0.0013836841098964214);
    for (double c : {0.008374824188649654, 0.04166822507977486, 0.16666419804096222, 0.49999991059303284, 1.0, 1.0}) {
      p = muladd(p, r, k(c));
    }
    return vscalef_ ? emit_scale_by_power_of_two(b_, p, n) : scale_in_two_halves(p, t);
  }

  // p * 2^n for the portable exp, n in the bits of t as exp_f32 rounds it
  // there (t = B + n + 254, B = 0x4B400000), in two halves so that
  // subnormal and overflowing results come out right: halved, the bits are
  // B/2 + n1 + 127 (n1 = floor(n/2)); the rest, B/2 + n2 + 127 (n2 = n -
  // n1): each a biased exponent once shifted into the exponent field, where
  // B/2 (low 20 bits zero) leaves the word. No round, convert or add.
  Value* scale_in_two_halves(Value* p, Value* t) {
    llvm::Type* ty = p->getType();
    llvm::Type* i32 = b_.getInt32Ty();
    Value* bits = b_.CreateBitCast(t, i32);
    Value* half = b_.CreateLShr(bits, 1);
    Value* scale1 = b_.CreateBitCast(b_.CreateShl(half, 23), ty);
    Value* scale2 = b_.CreateBitCast(b_.CreateShl(b_.CreateSub(bits, half), 23), ty);
    return b_.CreateFMul(b_.CreateFMul(p, scale1), scale2);
  }

  // Eager's vectorized float kernels (which every tensor of 32 floats or
  // more takes) compute sinh and cosh through expf(|x|): infinite once that
  // overflows, at |x| > ln(FLT_MAX), where libm's sinhf stays finite up to
  // 89.4. kiln gives the vectorized kernels' answer (eager's scalar tail
  // loop gives libm's; docs/fusion.md, "Numerics").
  Value* sinh_cosh(Value* x, bool cosh) {
    Value* r = libm(cosh ? "cosh" : "sinh", {x});
    if (!x->getType()->isFloatTy()) return r;
    llvm::Type* ty = x->getType();
    Value* inf = fconst(ty, std::numeric_limits<double>::infinity());
    Value* overflow = b_.CreateFCmpOGT(intrinsic(llvm::Intrinsic::fabs, {x}), fconst(ty, kLargestExpfArgument));
    return b_.CreateSelect(overflow, cosh ? inf : intrinsic(llvm::Intrinsic::copysign, {inf, x}), r);
  }
  static constexpr double kLargestExpfArgument = 88.72283172607421875;  // the largest float x with expf(x) finite

  // sin and cos both reduce to (-1)^n sin(r): x = r + q pi/2 with q = 2n
  // (sin) or 2n + 1 (cos), |r| <= pi/2, then one odd polynomial (SLEEF's
  // sinf_u35; measured within 1.7 ulp) instead of a sin and a cos polynomial and a
  // quadrant select. This path reduces in double with FMAs (pi/2 in two
  // parts): accurate while x / pi fits a double's integers (|x| < 2^50).
  // In the exact loop of a rerun, larger finite x branch to libm's double
  // sin/cos (which reduce exactly). Pointwise kernels take that loop when
  // an argument is large (emit_pointwise); row kernels, which have no such
  // loop, get no float sin/cos from fusion. NaN and infinities give NaN.
  Value* sincos_f32(Value* x, bool cosine) {
    if (largest_sincos_argument_) return sincos_f32_small(x, cosine);
    llvm::Type* f64 = b_.getDoubleTy();
    auto k = [&](double v) { return fconst(f64, v); };
    Value* xd = b_.CreateFPExt(x, f64);
    Value* n = intrinsic(llvm::Intrinsic::roundeven, {muladd(xd, k(kInvPi), k(cosine ? -0.5 : 0))});
    Value* r = subtract_half_pis(xd, n, cosine, {1.57079632679489655800, 6.12323399573676603587e-17});
    Value* finite = b_.CreateFCmpOLT(intrinsic(llvm::Intrinsic::fabs, {n}), k(9.0e15));
    Value* ni = b_.CreateTrunc(b_.CreateFPToSI(b_.CreateSelect(finite, n, k(0)), i64_), b_.getInt32Ty());  // n may pass 2^31
    if (cosine) ni = b_.CreateAdd(ni, b_.getInt32(1));
    Value* reduced = sin_reduced(b_.CreateFPTrunc(r, x->getType()), ni);
    if (!exact_rerun_) return reduced;
    Value* ax = intrinsic(llvm::Intrinsic::fabs, {xd});
    Value* huge = b_.CreateAnd(b_.CreateFCmpOGE(ax, k(kHugeSinLimit)),
                               b_.CreateFCmpONE(ax, k(std::numeric_limits<double>::infinity())));
    auto* from = b_.GetInsertBlock();
    auto* call = llvm::BasicBlock::Create(ctx_, "sincos.huge", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "sincos.done", fn_);
    b_.CreateCondBr(huge, call, done);
    b_.SetInsertPoint(call);
    Value* exact = b_.CreateFPTrunc(libm(cosine ? "cos" : "sin", {xd}), x->getType());
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    auto* phi = b_.CreatePHI(x->getType(), 2);
    phi->addIncoming(reduced, from);
    phi->addIncoming(exact, call);
    return phi;
  }
  static constexpr double kHugeSinLimit = 1125899906842624.0;  // 2^50

  // The same in float alone, for |x| <= kSmallSinLimit: pi/2 in three float
  // parts, each product exact inside an FMA, reduces as accurately as the
  // double path there (x - q*P1 is exact: a multiple of P1's ulp below 2).
  // n is rounded by adding 1.5 * 2^23, which leaves it in the low mantissa
  // bits. About twice as fast: no conversions, full-width vectors. The loop
  // keeps the largest |x| (as its bits, an unsigned maximum: two vector
  // instructions, where a compare into a mask register and an OR of masks
  // took three and spilled mask registers); the caller reruns the loop on
  // the double path when it passed the limit (so do infinities and NaN).
  // Keeps in `slot` the largest |x| seen, as float bits (an unsigned maximum).
  void track_largest(Value* x, Value* slot) {
    Value* magnitude = b_.CreateAnd(b_.CreateBitCast(x, b_.getInt32Ty()), b_.getInt32(0x7fffffff));
    Value* largest = b_.CreateLoad(b_.getInt32Ty(), slot);
    b_.CreateStore(intrinsic(llvm::Intrinsic::umax, {largest, magnitude}), slot);
  }

  Value* sincos_f32_small(Value* x, bool cosine) {
    llvm::Type* f32 = x->getType();
    auto k = [&](double v) { return fconst(f32, v); };
    track_largest(x, largest_sincos_argument_);
    Value* t = cosine ? b_.CreateFAdd(muladd(x, k(kInvPi), k(-0.5)), k(kRoundMagic))
                      : intrinsic(llvm::Intrinsic::fma, {x, k(kInvPi), k(kRoundMagic)});
    Value* n = b_.CreateFSub(t, k(kRoundMagic));
    Value* r = subtract_half_pis(x, n, cosine, {1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15});
    Value* ni = b_.CreateBitCast(t, b_.getInt32Ty());  // n's parity is its low bit
    if (cosine) ni = b_.CreateAdd(ni, b_.getInt32(1));
    return sin_reduced(r, ni);
  }

  // x - q pi/2 with q = 2n + 1 (cos) or 2n (sin: n times pi, the doubled
  // parts, which stay exact), pi/2 given as parts each exact in x's type and
  // subtracted one FMA at a time.
  Value* subtract_half_pis(Value* x, Value* n, bool cosine, std::initializer_list<double> half_pi_parts) {
    auto k = [&](double v) { return fconst(x->getType(), v); };
    Value* q = cosine ? muladd(n, k(2), k(1)) : n;
    const double m = cosine ? 1 : 2;
    for (double part : half_pi_parts) x = intrinsic(llvm::Intrinsic::fma, {b_.CreateFNeg(q), k(m * part), x});
    return x;
  }

  // (-1)^n sin(r) for |r| <= pi/2 (a little beyond is fine); only n's low
  // bit matters. sin is odd, so the sign goes onto r first.
  Value* sin_reduced(Value* r, Value* n) {
    llvm::Type* f32 = r->getType();
    auto k = [&](double v) { return fconst(f32, v); };
    Value* sign = b_.CreateShl(n, 31);
    r = b_.CreateBitCast(b_.CreateXor(b_.CreateBitCast(r, n->getType()), sign), f32);
    Value* s = b_.CreateFMul(r, r);
    Value* u = k(2.6083159809786593541503e-06);
    for (double c : {-0.0001981069071916863322258, 0.00833307858556509017944336, -0.166666597127914428710938}) {
      u = muladd(u, s, k(c));
    }
    return muladd(s, b_.CreateFMul(u, r), r);
  }

  // Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), as at::vec's erf,
  // for |x| >= 0.5.
  Value* erf_f32(Value* x) {
    llvm::Type* ty = x->getType();
    auto k = [&](double v) { return fconst(ty, v); };
    Value* ax = intrinsic(llvm::Intrinsic::fabs, {x});
    Value* t = b_.CreateFDiv(k(1), muladd(k(0.3275911), ax, k(1)));
    Value* r = k(1.061405429);
    for (double c : {-1.453152027, 1.421413741, -0.284496736, 0.254829592}) r = muladd(r, t, k(c));
    Value* e = exp_value(b_.CreateFNeg(b_.CreateFMul(x, x)));
    Value* y = intrinsic(llvm::Intrinsic::copysign, {b_.CreateFSub(k(1), b_.CreateFMul(b_.CreateFMul(e, t), r)), x});
    // Near 0 that form loses relative accuracy (1 - r t e cancels): the
    // Taylor series, exact to 1e-9 relative for |x| < 0.5.
    Value* z = b_.CreateFMul(x, x);
    Value* s = k(1.0 / 9360);
    for (double c : {-1.0 / 1320, 1.0 / 216, -1.0 / 42, 1.0 / 10, -1.0 / 3, 1.0}) s = muladd(s, z, k(c));
    Value* series = b_.CreateFMul(b_.CreateFMul(x, k(1.12837916709551257390)), s);
    return b_.CreateSelect(b_.CreateFCmpOLT(ax, k(0.5)), series, y);
  }

  Value* compare(Op op, Value* a, Value* b, DType t) {
    if (ir::is_floating(t)) {
      switch (op) {
        case Op::Eq: return b_.CreateFCmpOEQ(a, b);
        case Op::Ne: return b_.CreateFCmpUNE(a, b);
        case Op::Lt: return b_.CreateFCmpOLT(a, b);
        case Op::Le: return b_.CreateFCmpOLE(a, b);
        case Op::Gt: return b_.CreateFCmpOGT(a, b);
        default: return b_.CreateFCmpOGE(a, b);
      }
    }
    const bool u = is_unsigned(t);
    switch (op) {
      case Op::Eq: return b_.CreateICmpEQ(a, b);
      case Op::Ne: return b_.CreateICmpNE(a, b);
      case Op::Lt: return u ? b_.CreateICmpULT(a, b) : b_.CreateICmpSLT(a, b);
      case Op::Le: return u ? b_.CreateICmpULE(a, b) : b_.CreateICmpSLE(a, b);
      case Op::Gt: return u ? b_.CreateICmpUGT(a, b) : b_.CreateICmpSGT(a, b);
      default: return u ? b_.CreateICmpUGE(a, b) : b_.CreateICmpSGE(a, b);
    }
  }

  Value* binary(Op op, Value* a, Value* b, DType t) {
    const bool f = ir::is_floating(t);
    const bool boolean = t == DType::Bool;
    switch (op) {
      case Op::Add: return f ? b_.CreateFAdd(a, b) : (boolean ? b_.CreateOr(a, b) : b_.CreateAdd(a, b));
      case Op::Sub: return f ? b_.CreateFSub(a, b) : (boolean ? b_.CreateXor(a, b) : b_.CreateSub(a, b));
      case Op::Mul: return f ? b_.CreateFMul(a, b) : (boolean ? b_.CreateAnd(a, b) : b_.CreateMul(a, b));
      case Op::Div:
        if (!f) throw std::runtime_error("kiln codegen: integer division is not lowered (division by zero must raise)");
        return b_.CreateFDiv(a, b);
      case Op::Pow:
        if (!f) throw std::runtime_error("kiln codegen: integer pow is not lowered");
        return intrinsic(llvm::Intrinsic::pow, {a, b});
      case Op::Atan2: return libm("atan2", {a, b});
      case Op::Fmod:
        if (!f) throw std::runtime_error("kiln codegen: integer fmod is not lowered");
        return b_.CreateFRem(a, b);
      case Op::CopySign: return intrinsic(llvm::Intrinsic::copysign, {a, b});
      // NaN if either is NaN (a + b is that NaN), else maxnum/minnum; a tie
      // of +0 and -0 gives either, as eager's loops do (its vector loop the
      // second, its scalar loop the first). Not llvm.maximum/minimum: LLVM 19
      // narrows them to half vectors, whose x86 lowering returns -0 for
      // minimum(-0, NaN). Nor a compare-and-select: InstCombine folds
      // select(isnan(a), a, select(a > 0, a, 0)) with a = fabs(x) into a
      // compare of x itself (x > 0), which drops negative x.
      case Op::MaxEitherNaN:
      case Op::MinEitherNaN: {
        const bool is_max = op == Op::MaxEitherNaN;
        if (!f) {
          const bool u = is_unsigned(t);
          return intrinsic(is_max ? (u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax)
                                  : (u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin), {a, b});
        }
        Value* picked = intrinsic(is_max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, {a, b});
        return b_.CreateSelect(b_.CreateFCmpUNO(a, b), b_.CreateFAdd(a, b), picked);
      }
      // std::max / std::min: a NaN in the first operand propagates (clamp).
      case Op::MaxFirstNaN: return b_.CreateSelect(compare(Op::Lt, a, b, t), b, a);
      case Op::MinFirstNaN: return b_.CreateSelect(compare(Op::Lt, b, a, t), b, a);
      case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge:
        return compare(op, a, b, t);
      case Op::And: return b_.CreateAnd(a, b);
      case Op::Or: return b_.CreateOr(a, b);
      case Op::Xor: return b_.CreateXor(a, b);
      case Op::BitAnd: return b_.CreateAnd(a, b);
      case Op::BitOr: return b_.CreateOr(a, b);
      case Op::BitXor: return b_.CreateXor(a, b);
      default: break;
    }
    throw std::runtime_error(std::string("kiln codegen: no lowering for ") + ir::op_name(op));
  }

  // ------------------------------------------------------------ expressions

  // Each pointer slot is its own allocation (fusion never gives one
  // allocation two slots), so accesses through different slots never alias.
  // Saying so spares the vectorizer its runtime overlap checks, which it
  // gives up on past a handful of pointers (an AdamW region has dozens).
  void make_alias_scopes() {
    llvm::MDBuilder md(ctx_);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("kiln.buffers");
    std::vector<llvm::Metadata*> scopes;
    for (int i = 0; i < k_.num_buffers; ++i) scopes.push_back(md.createAnonymousAliasScope(domain, "buffer" + std::to_string(i)));
    for (int i = 0; i < k_.num_buffers; ++i) {
      scope_.push_back(llvm::MDNode::get(ctx_, {scopes[i]}));
      std::vector<llvm::Metadata*> others;
      for (int j = 0; j < k_.num_buffers; ++j) {
        if (j != i) others.push_back(scopes[j]);
      }
      noalias_.push_back(llvm::MDNode::get(ctx_, others));
    }
  }
  void mark_buffer(llvm::Instruction* access, int buffer) {
    access->setMetadata(llvm::LLVMContext::MD_alias_scope, scope_[buffer]);
    access->setMetadata(llvm::LLVMContext::MD_noalias, noalias_[buffer]);
  }

  Value* address(int access, Scope& s) {
    Value* off = s.offset[access];
    if (!off) throw std::runtime_error("kiln codegen: access used outside its loop");
    Value* base = s.base[access] ? s.base[access] : base_[k_.accesses[access].buffer];
    return b_.CreateInBoundsGEP(mem_type(k_.accesses[access].dtype), base, off);
  }

  Value* value(int id, Scope& s) {
    if (s.memo[id]) return s.memo[id];
    const ir::Node& n = k_.nodes[id];
    Value* v = nullptr;
    auto in = [&](int j) { return value(n.in[j], s); };
    auto in_dtype = [&](int j) { return k_.nodes[n.in[j]].dtype; };
    switch (n.op) {
      case Op::Load: {
        const ir::Access& a = k_.accesses[n.arg];
        v = b_.CreateLoad(mem_type(a.dtype), address(n.arg, s));
        mark_buffer(llvm::cast<llvm::Instruction>(v), a.buffer);
        if (a.dtype == DType::Bool) v = b_.CreateICmpNE(v, b_.getInt8(0));
        break;
      }
      case Op::Scalar:
        if (ir::is_floating(n.dtype)) {
          Value* d = launch_arg(b_.getDoubleTy(), scalars_, n.arg);
          v = cast(d, DType::Float64, n.dtype);
        } else {
          v = cast(int_arg(k_.int_scalar_index(n.arg)), DType::Int64, n.dtype);
        }
        break;
      case Op::Constant:
        if (ir::is_reduced_float(n.dtype)) v = from_f32(fconst(b_.getFloatTy(), n.imm), n.dtype);
        else if (ir::is_floating(n.dtype)) v = fconst(reg_type(n.dtype), n.imm);
        else v = llvm::ConstantInt::get(reg_type(n.dtype), static_cast<uint64_t>(static_cast<int64_t>(n.imm)), true);
        break;
      case Op::ReduceValue:
        v = b_.CreateLoad(reg_type(k_.reductions[n.arg].dtype), results_[n.arg]);
        break;
      case Op::Cast: v = cast(in(0), in_dtype(0), n.dtype); break;
      case Op::Where: v = b_.CreateSelect(in(0), in(1), in(2)); break;
      case Op::Fma:
        v = ir::is_floating(n.dtype) ? intrinsic(llvm::Intrinsic::fma, {in(0), in(1), in(2)})
                                     : b_.CreateAdd(b_.CreateMul(in(0), in(1)), in(2));
        break;
      default:
        if (ir::op_arity(n.op) == 1) v = unary(n.op, in(0), in_dtype(0));
        else v = binary(n.op, in(0), in(1), in_dtype(0));
    }
    s.memo[id] = v;
    return v;
  }

  // Every value first, then every store: a value may load the address an
  // earlier store of the same iteration writes (x read by one op, then
  // written in place by the next), and must see the old contents.
  void store_all(const std::vector<const ir::Store*>& stores, Scope& s) {
    std::vector<Value*> values;
    for (const ir::Store* st : stores) values.push_back(value(st->value, s));
    for (size_t i = 0; i < stores.size(); ++i) {
      Value* v = values[i];
      if (k_.accesses[stores[i]->access].dtype == DType::Bool) v = b_.CreateZExt(v, b_.getInt8Ty());
      mark_buffer(b_.CreateStore(v, address(stores[i]->access, s)), k_.accesses[stores[i]->access].buffer);
    }
  }
  std::vector<const ir::Store*> stores_where(bool row_invariant) {
    std::vector<const ir::Store*> out;
    for (const ir::Store& st : k_.stores) {
      if (k_.reduce_rank == 0 || k_.accesses[st.access].row_invariant == row_invariant) out.push_back(&st);
    }
    return out;
  }

  // ------------------------------------------------------------ loops

  // How an innermost loop asks to be vectorized.
  //  Auto: as LLVM sees fit: max, min, arg-max/min and product loops, whose
  //    float forms it leaves scalar (NaN propagation, order).
  //  Wide: fill a 512-bit register with the kernel's widest element type.
  //    Left to itself LLVM often picks 8 floats when a math function widens
  //    to double inside (sin's exact reduction), which halves the throughput
  //    of compute-bound chains (measured 15 -> 10 ms on the benchmark chain).
  //    On a sum loop the hint also lets the vectorizer reorder a float sum
  //    (LoopVectorizeHints::allowReordering) into one partial sum per lane,
  //    combined at the end of the row. Eager's CPU kernels sum in vector
  //    lanes too, so neither order is sequential; partial sums are no less
  //    accurate, and the order is fixed for a given row length. Measured:
  //    softmax over 2048x1024 7.5 -> 2.9 ms, LayerNorm 1.7 -> 0.7 ms.
  //    Element loops (not sums) of a kernel where one value passes through
  //    two or more of kiln's own math functions (has_deep_math) also
  //    interleave 8 vectors instead of LLVM's 4: each function is a chain of
  //    10-20 dependent FMAs, and with 4 vectors in flight the loop waits on
  //    latency, not on the FMA ports (measured on the benchmark chain, one
  //    thread, 4096 elements in L1: 4.1 -> 3.1 us; 16 vectors spill and take
  //    4.5 us). Functions on separate paths already overlap: GELU's
  //    backward (erf and exp of x) ran no faster 8 deep (3.29 against 3.32
  //    us, alternating) and compiled in 32 ms instead of 14.
  //  WideSum: Wide for a sum loop, interleaved as LLVM sees fit.
  //  Scalar: not vectorized (a rarely taken path, not worth its compile time).
  enum class Vectorize { Auto, Wide, WideSum, Scalar };

  // for (i = lo; i < hi; ++i) body(i). Leaves the builder after the loop.
  void loop(Value* lo, Value* hi, const std::string& name, const std::function<void(Value*)>& body,
            Vectorize vectorize = Vectorize::Auto) {
    auto* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx_, name + ".head", fn_);
    auto* bodyb = llvm::BasicBlock::Create(ctx_, name + ".body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, name + ".exit", fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    auto* i = b_.CreatePHI(i64_, 2, name);
    i->addIncoming(lo, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, hi), bodyb, exit);
    b_.SetInsertPoint(bodyb);
    body(i);
    Value* next = b_.CreateAdd(i, b_.getInt64(1), name + ".next", /*HasNUW=*/true, /*HasNSW=*/true);
    i->addIncoming(next, b_.GetInsertBlock());
    auto* latch = b_.CreateBr(head);
    if (vectorize != Vectorize::Auto) latch->setMetadata(llvm::LLVMContext::MD_loop, loop_hints(vectorize));
    b_.SetInsertPoint(exit);
  }

  llvm::MDNode* loop_hints(Vectorize vectorize) {
    auto hint = [&](const char* name, llvm::Constant* value) {
      return llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name), llvm::ConstantAsMetadata::get(value)});
    };
    llvm::SmallVector<llvm::Metadata*, 3> ops{nullptr};  // loop IDs refer to themselves
    if (vectorize == Vectorize::Scalar) {
      ops.push_back(hint("llvm.loop.vectorize.enable", b_.getFalse()));
    } else {
      ops.push_back(hint("llvm.loop.vectorize.width", b_.getInt32(vector_width())));
      if (vectorize == Vectorize::Wide && deep_math_) ops.push_back(hint("llvm.loop.interleave.count", b_.getInt32(8)));
    }
    auto* node = llvm::MDNode::getDistinct(ctx_, ops);
    node->replaceOperandWith(0, node);
    return node;
  }

  int vector_width() const {
    int widest = 32;
    for (const ir::Node& n : k_.nodes) {
      if (n.op == Op::Scalar) continue;  // loop-invariant: a double learning rate does not halve the width
      if (n.dtype == DType::Int64 || n.dtype == DType::Float64) widest = 64;
    }
    return 512 / widest;
  }

  // Splits a linear index over dims [first, last) into coordinates (row-major).
  std::vector<Value*> coordinates(Value* linear, int first, int last) {
    std::vector<Value*> c(k_.rank, nullptr);
    Value* rem = linear;
    for (int d = last - 1; d >= first; --d) {
      if (d == first) {
        c[d] = rem;
      } else {
        c[d] = b_.CreateURem(rem, sizes_[d]);
        rem = b_.CreateUDiv(rem, sizes_[d]);
      }
    }
    return c;
  }

  Value* offset_at(int a, const std::vector<Value*>& coords, int first, int last, Value* base) {
    Value* off = base;
    for (int d = first; d < last; ++d) off = b_.CreateAdd(off, b_.CreateMul(coords[d], strides_[a][d]));
    return off;
  }

  Scope new_scope() {
    Scope s;
    s.offset.assign(k_.accesses.size(), nullptr);
    s.memo.assign(k_.nodes.size(), nullptr);
    s.base.assign(k_.accesses.size(), nullptr);
    return s;
  }

  // Pointwise: the work range is a range of linear element indices. Walk it
  // one innermost-dim run at a time: coordinates once per run, then a plain
  // loop the vectorizer can take.
  void emit_pointwise(Value* begin, Value* end) {
    const int R = k_.rank;
    // In the entry block, so that they become a register (a max-reduction)
    // and stack slots.
    Value* largest_sincos_argument = uses_float_sincos() ? b_.CreateAlloca(b_.getInt32Ty()) : nullptr;
    const bool streams = k_.streaming_stores;
    const std::vector<Value*> tiles = streams ? make_tiles() : std::vector<Value*>{};
    auto* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx_, "run.head", fn_);
    auto* body = llvm::BasicBlock::Create(ctx_, "run.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "run.exit", fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    auto* i = b_.CreatePHI(i64_, 2, "i");
    i->addIncoming(begin, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, end), body, exit);
    b_.SetInsertPoint(body);
    std::vector<Value*> c = coordinates(i, 0, R);
    Value* start = c[R - 1];
    Value* run_left = b_.CreateSub(sizes_[R - 1], start);
    Value* range_left = b_.CreateSub(end, i);
    Value* count = b_.CreateSelect(b_.CreateICmpSLT(run_left, range_left), run_left, range_left, "count");
    std::vector<Value*> row_base;
    for (size_t a = 0; a < k_.accesses.size(); ++a) {
      Value* off = offset_at(static_cast<int>(a), c, 0, R - 1, offsets_[a]);
      row_base.push_back(b_.CreateAdd(off, b_.CreateMul(start, strides_[a][R - 1])));
    }
    Placement placed;
    if (streams) {
      placed = place_run(tiles, count, row_base);
      count = placed.count;
    }
    auto scope_at = [&](Value* j) {
      Scope s = new_scope();
      for (size_t a = 0; a < k_.accesses.size(); ++a) {
        s.offset[a] = b_.CreateAdd(row_base[a], b_.CreateMul(j, strides_[a][R - 1]));
      }
      for (size_t a = 0; a < placed.dest.size(); ++a) {
        if (placed.dest[a] == nullptr) continue;
        s.base[a] = placed.dest[a];
        s.offset[a] = j;
      }
      return s;
    };
    auto run = [&](const char* name, Vectorize vectorize) {
      loop(b_.getInt64(0), count, name, [&](Value* j) {
        Scope s = scope_at(j);
        store_all(stores_where(false), s);
      }, vectorize);
    };
    if (largest_sincos_argument == nullptr) {
      run("j", Vectorize::Wide);
    } else if (!may_rerun()) {
      // In place: a run cannot be computed twice (its first stores would
      // feed the second). Scan its sin/cos arguments first (loads only),
      // then take the float loop or the exact one.
      b_.CreateStore(b_.getInt32(0), largest_sincos_argument);
      loop(b_.getInt64(0), count, "j.scan", [&](Value* j) {
        Scope s = scope_at(j);
        for (const ir::Node& n : k_.nodes) {
          if (!is_float_sincos(n)) continue;
          track_largest(value(n.in[0], s), largest_sincos_argument);
        }
      }, Vectorize::Wide);
      auto* small = llvm::BasicBlock::Create(ctx_, "run.small", fn_);
      auto* exact = llvm::BasicBlock::Create(ctx_, "run.exact", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "run.done", fn_);
      Value* largest = b_.CreateLoad(b_.getInt32Ty(), largest_sincos_argument);
      b_.CreateCondBr(b_.CreateICmpUGT(largest, b_.getInt32(kSmallSinLimitBits)), exact, small);
      b_.SetInsertPoint(small);
      largest_sincos_argument_ = largest_sincos_argument;
      run("j.small", Vectorize::Wide);
      largest_sincos_argument_ = nullptr;
      b_.CreateBr(done);
      b_.SetInsertPoint(exact);
      exact_rerun_ = true;
      run("j", Vectorize::Scalar);
      exact_rerun_ = false;
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    } else {
      // Optimistic: the run with float-only sin/cos; if any argument was out
      // of its range, all of it again through the exact loop (nothing the
      // first loop stored is read again, see may_rerun()). The exact loop
      // stays scalar: it runs only for huge arguments, and a second
      // vectorized copy of the chain cost a quarter of the compile time.
      b_.CreateStore(b_.getInt32(0), largest_sincos_argument);
      largest_sincos_argument_ = largest_sincos_argument;
      run("j.small", Vectorize::Wide);
      largest_sincos_argument_ = nullptr;
      auto* exact = llvm::BasicBlock::Create(ctx_, "run.exact", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "run.done", fn_);
      Value* largest = b_.CreateLoad(b_.getInt32Ty(), largest_sincos_argument);
      b_.CreateCondBr(b_.CreateICmpUGT(largest, b_.getInt32(kSmallSinLimitBits)), exact, done);
      b_.SetInsertPoint(exact);
      // After the first loop's non-temporal stores to the same addresses.
      if (streams) b_.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
      exact_rerun_ = true;
      run("j", Vectorize::Scalar);
      exact_rerun_ = false;
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    }
    if (streams) copy_out_of_tiles(tiles, placed);
    i->addIncoming(b_.CreateAdd(i, count), b_.GetInsertBlock());
    b_.CreateBr(head);
    b_.SetInsertPoint(exit);
    // Non-temporal stores are weakly ordered: make them visible before the
    // caller signals that this piece is done (seq_cst is an mfence on x86;
    // weaker fences emit nothing there and would not order them).
    if (streams) b_.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
  }

  // ------------------------------------------------------------ streaming stores

  // A kernel with streaming_stores writes its output with non-temporal
  // stores: whole lines, written without first reading them into the cache
  // (a read for ownership) and without displacing what is cached. LLVM's
  // vectorizer refuses a loop whose non-temporal stores it cannot prove
  // aligned, so the loop is vectorized with plain stores whose base is
  // assumed 64-byte aligned, and mark_streaming_stores makes the vector
  // stores non-temporal afterwards. A run whose stores do not start on a
  // line goes to line-aligned tiles on the stack first: only its head (up
  // to the first store's next line) when the others are aligned alike,
  // else a tile at a time; memcpy then moves the tiles to the run.
  static constexpr uint64_t kLineBytes = 64;
  static constexpr int64_t kTileBytes = 4096;  // per store; the misaligned path only

  // In the entry block, so that they are stack slots: one tile per stored access.
  std::vector<Value*> make_tiles() {
    std::vector<Value*> tiles(k_.accesses.size(), nullptr);
    for (const ir::Store& st : k_.stores) {
      auto* tile = b_.CreateAlloca(llvm::ArrayType::get(b_.getInt8Ty(), kTileBytes), nullptr, "tile");
      tile->setAlignment(llvm::Align(kLineBytes));
      tiles[st.access] = tile;
    }
    return tiles;
  }

  struct Placement {
    Value* count = nullptr;       // elements of the run taken now
    Value* misaligned = nullptr;  // i1: they go to the tiles
    std::vector<Value*> row;      // per stored access: where the run starts
    std::vector<Value*> dest;     // per stored access: where its element 0 is stored (line-aligned)
  };

  // Where this run's stores go, and how much of it is taken now (the rest
  // of the run comes back as a run of its own).
  Placement place_run(const std::vector<Value*>& tiles, Value* count, const std::vector<Value*>& row_base) {
    Placement p;
    p.row.assign(k_.accesses.size(), nullptr);
    p.dest.assign(k_.accesses.size(), nullptr);
    Value* misaligned = b_.getFalse();
    Value* head = nullptr;  // elements from the first store's start to its next line
    int64_t tile_elements = 0;
    for (size_t a = 0; a < tiles.size(); ++a) {
      if (tiles[a] == nullptr) continue;
      const int64_t size = ir::dtype_size(k_.accesses[a].dtype);
      p.row[a] = b_.CreateInBoundsGEP(mem_type(k_.accesses[a].dtype), base_[k_.accesses[a].buffer], row_base[a]);
      Value* low = b_.CreateAnd(b_.CreatePtrToInt(p.row[a], i64_), kLineBytes - 1);
      misaligned = b_.CreateOr(misaligned, b_.CreateICmpNE(low, b_.getInt64(0)));
      if (head == nullptr) {  // elements are aligned to their size: low is a multiple of it
        head = b_.CreateUDiv(b_.CreateAnd(b_.CreateSub(b_.getInt64(kLineBytes), low), kLineBytes - 1), b_.getInt64(size));
      }
      tile_elements = tile_elements == 0 ? kTileBytes / size : std::min(tile_elements, kTileBytes / size);
    }
    Value* tile = b_.getInt64(tile_elements);
    Value* chunk = b_.CreateSelect(b_.CreateICmpEQ(head, b_.getInt64(0)), tile, head);
    chunk = b_.CreateSelect(b_.CreateICmpSLT(count, chunk), count, chunk);
    p.misaligned = misaligned;
    p.count = b_.CreateSelect(misaligned, chunk, count, "taken");
    for (size_t a = 0; a < tiles.size(); ++a) {
      if (tiles[a] == nullptr) continue;
      p.dest[a] = b_.CreateSelect(misaligned, tiles[a], p.row[a]);
      b_.CreateAlignmentAssumption(m_.getDataLayout(), p.dest[a], kLineBytes);
    }
    return p;
  }

  void copy_out_of_tiles(const std::vector<Value*>& tiles, const Placement& p) {
    auto* copy = llvm::BasicBlock::Create(ctx_, "untile", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "untile.done", fn_);
    b_.CreateCondBr(p.misaligned, copy, done);
    b_.SetInsertPoint(copy);
    // The tiles may have been written non-temporally too.
    b_.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
    for (size_t a = 0; a < tiles.size(); ++a) {
      if (tiles[a] == nullptr) continue;
      const int64_t size = ir::dtype_size(k_.accesses[a].dtype);
      b_.CreateMemCpy(p.row[a], llvm::MaybeAlign(size), tiles[a], llvm::MaybeAlign(kLineBytes),
                      b_.CreateMul(p.count, b_.getInt64(size)));
    }
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  bool uses_float_sincos() const {
    for (const ir::Node& n : k_.nodes) {
      if (is_float_sincos(n)) return true;
    }
    return false;
  }
  static bool is_float_sincos(const ir::Node& n) {
    return (n.op == Op::Sin || n.op == Op::Cos) && ir::is_floating(n.dtype) && n.dtype != DType::Float64;
  }

  // A run can be computed twice only if no buffer it stores to is one it
  // loads from (an in-place op would read its own first results).
  bool may_rerun() const {
    std::vector<bool> stored(k_.num_buffers, false);
    for (const ir::Store& st : k_.stores) stored[k_.accesses[st.access].buffer] = true;
    for (const ir::Node& n : k_.nodes) {
      if (n.op == Op::Load && stored[k_.accesses[n.arg].buffer]) return false;
    }
    return true;
  }

  // Loops over the reduced dims [K0, R) of one row; body gets a scope with
  // every access's element offset and the running linear index in the row.
  void reduced_loops(const std::vector<Value*>& row_base,
                     const std::function<void(Scope&, Value*)>& body, Vectorize innermost) {
    const int R = k_.rank, K0 = R - k_.reduce_rank;
    std::function<void(int, std::vector<Value*>, Value*)> nest = [&](int d, std::vector<Value*> base, Value* lin) {
      loop(b_.getInt64(0), sizes_[d], "r" + std::to_string(d), [&](Value* i) {
        std::vector<Value*> off;
        for (size_t a = 0; a < k_.accesses.size(); ++a) off.push_back(b_.CreateAdd(base[a], b_.CreateMul(i, strides_[a][d])));
        Value* l = b_.CreateAdd(b_.CreateMul(lin, sizes_[d]), i);
        if (d + 1 < R) {
          nest(d + 1, off, l);
        } else {
          Scope s = new_scope();
          s.offset = off;
          body(s, l);
        }
      }, d + 1 == R ? innermost : Vectorize::Auto);
    };
    nest(K0, row_base, b_.getInt64(0));
  }

  Value* reduce_init(const ir::Reduction& r) {
    llvm::Type* ty = reg_type(r.dtype);
    const bool f = ir::is_floating(r.dtype);
    const double inf = std::numeric_limits<double>::infinity();
    switch (r.kind) {
      case ir::ReduceKind::Sum: return f ? fconst(ty, 0) : llvm::ConstantInt::get(ty, 0);
      case ir::ReduceKind::Prod: return f ? fconst(ty, 1) : llvm::ConstantInt::get(ty, 1);
      case ir::ReduceKind::Max:
        return f ? fconst(ty, -inf) : (is_unsigned(r.dtype) ? llvm::ConstantInt::get(ty, 0) : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth())));
      case ir::ReduceKind::Min:
        return f ? fconst(ty, inf) : (is_unsigned(r.dtype) ? llvm::ConstantInt::get(ty, llvm::APInt::getMaxValue(ty->getIntegerBitWidth())) : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMaxValue(ty->getIntegerBitWidth())));
      case ir::ReduceKind::Any: return b_.getFalse();
      case ir::ReduceKind::All: return b_.getTrue();
      case ir::ReduceKind::ArgMax:
      case ir::ReduceKind::ArgMin: return b_.getInt64(0);
    }
    return nullptr;
  }

  void emit_rows(Value* begin, Value* end) {
    const int R = k_.rank, K0 = R - k_.reduce_rank;
    // Accumulators live in allocas (promoted to registers by the optimizer).
    for (const ir::Reduction& r : k_.reductions) {
      results_.push_back(b_.CreateAlloca(reg_type(r.dtype)));
      const bool arg = r.kind == ir::ReduceKind::ArgMax || r.kind == ir::ReduceKind::ArgMin;
      best_.push_back(arg ? b_.CreateAlloca(reg_type(k_.nodes[r.value].dtype)) : nullptr);
    }
    loop(begin, end, "row", [&](Value* row) {
      std::vector<Value*> outer = coordinates(row, 0, K0);
      std::vector<Value*> row_base;
      for (size_t a = 0; a < k_.accesses.size(); ++a) row_base.push_back(offset_at(static_cast<int>(a), outer, 0, K0, offsets_[a]));
      for (size_t ri = 0; ri < k_.reductions.size(); ++ri) emit_reduction(static_cast<int>(ri), row_base);
      const std::vector<const ir::Store*> element_stores = stores_where(false);
      if (!element_stores.empty()) {
        reduced_loops(row_base, [&](Scope& s, Value*) { store_all(element_stores, s); }, Vectorize::Wide);
      }
      Scope rs = new_scope();
      for (size_t a = 0; a < k_.accesses.size(); ++a) {
        if (k_.accesses[a].row_invariant) rs.offset[a] = row_base[a];
      }
      store_all(stores_where(true), rs);
    });
  }

  void emit_reduction(int ri, const std::vector<Value*>& row_base) {
    const ir::Reduction& r = k_.reductions[ri];
    const DType vt = k_.nodes[r.value].dtype;
    const bool f = ir::is_floating(vt);
    b_.CreateStore(reduce_init(r), results_[ri]);
    const bool is_arg = r.kind == ir::ReduceKind::ArgMax || r.kind == ir::ReduceKind::ArgMin;
    if (is_arg) {
      const double inf = std::numeric_limits<double>::infinity();
      llvm::Type* ty = reg_type(vt);
      Value* init;
      if (f) init = fconst(ty, r.kind == ir::ReduceKind::ArgMax ? -inf : inf);
      else if (vt == DType::Bool) init = b_.getInt1(r.kind == ir::ReduceKind::ArgMin);
      else if (r.kind == ir::ReduceKind::ArgMax)
        init = is_unsigned(vt) ? llvm::ConstantInt::get(ty, 0) : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()));
      else
        init = is_unsigned(vt) ? llvm::ConstantInt::get(ty, llvm::APInt::getMaxValue(ty->getIntegerBitWidth())) : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMaxValue(ty->getIntegerBitWidth()));
      b_.CreateStore(init, best_[ri]);
    }
    reduced_loops(row_base, [&](Scope& s, Value* lin) {
      Value* v = value(r.value, s);
      Value* acc = b_.CreateLoad(reg_type(r.dtype), results_[ri]);
      Value* next = nullptr;
      switch (r.kind) {
        case ir::ReduceKind::Sum: next = binary(Op::Add, acc, cast(v, vt, r.dtype), r.dtype); break;
        case ir::ReduceKind::Prod: next = binary(Op::Mul, acc, cast(v, vt, r.dtype), r.dtype); break;
        case ir::ReduceKind::Max:
        case ir::ReduceKind::Min: {
          Value* x = cast(v, vt, r.dtype);
          Value* better = compare(r.kind == ir::ReduceKind::Max ? Op::Gt : Op::Lt, x, acc, r.dtype);
          if (ir::is_floating(r.dtype)) better = b_.CreateOr(better, b_.CreateFCmpUNO(x, x));  // NaN wins
          next = b_.CreateSelect(better, x, acc);
          break;
        }
        case ir::ReduceKind::Any: next = b_.CreateOr(acc, cast(v, vt, DType::Bool)); break;
        case ir::ReduceKind::All: next = b_.CreateAnd(acc, cast(v, vt, DType::Bool)); break;
        case ir::ReduceKind::ArgMax:
        case ir::ReduceKind::ArgMin: {
          // First index of the extreme value; the first NaN wins and stays.
          Value* best = b_.CreateLoad(reg_type(vt), best_[ri]);
          Value* better = compare(r.kind == ir::ReduceKind::ArgMax ? Op::Gt : Op::Lt, v, best, vt);
          if (f) better = b_.CreateAnd(b_.CreateOr(better, b_.CreateFCmpUNO(v, v)), b_.CreateFCmpORD(best, best));
          b_.CreateStore(b_.CreateSelect(better, v, best), best_[ri]);
          next = b_.CreateSelect(better, lin, acc);
          break;
        }
      }
      b_.CreateStore(next, results_[ri]);
    }, r.kind == ir::ReduceKind::Sum ? Vectorize::WideSum : Vectorize::Auto);
  }

  const ir::Kernel& k_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  bool fast_math_;
  bool vscalef_;    // exp scales by 2^n with vscalefps (see exp_f32)
  bool deep_math_;  // interleave element loops 8 vectors deep (see Vectorize)
  llvm::Type* i64_;
  llvm::Function* fn_ = nullptr;
  Value* ints_ = nullptr;
  Value* scalars_ = nullptr;
  std::vector<Value*> base_, sizes_, offsets_;
  std::vector<std::vector<Value*>> strides_;
  std::vector<bool> row_level_;
  std::vector<Value*> results_, best_;
  Value* largest_sincos_argument_ = nullptr;  // set while emitting a loop with the float-only sin/cos
  bool exact_rerun_ = false;  // set while emitting the exact loop that reruns a run (see sincos_f32)
  std::vector<llvm::MDNode*> scope_, noalias_;  // per pointer slot
};

}  // namespace

void lower_to_llvm(const ir::Kernel& kernel, const std::string& symbol, llvm::Module& module, const Options& options) {
  Lowering(kernel, module, options).emit(symbol);
}

void mark_streaming_stores(llvm::Module& module) {
  const llvm::DataLayout& layout = module.getDataLayout();
  llvm::MDNode* one = llvm::MDNode::get(module.getContext(), {llvm::ConstantAsMetadata::get(
      llvm::ConstantInt::get(llvm::Type::getInt32Ty(module.getContext()), 1))});
  for (llvm::Function& fn : module) {
    for (llvm::BasicBlock& block : fn) {
      for (llvm::Instruction& inst : block) {
        auto* st = llvm::dyn_cast<llvm::StoreInst>(&inst);
        if (st == nullptr || !st->getValueOperand()->getType()->isVectorTy()) continue;
        // An under-aligned non-temporal vector store is split down to
        // scalar movnti on x86: only whole, aligned vectors.
        if (st->getAlign().value() < layout.getTypeStoreSize(st->getValueOperand()->getType())) continue;
        st->setMetadata(llvm::LLVMContext::MD_nontemporal, one);
      }
    }
  }
}

}  // namespace kiln::codegen
