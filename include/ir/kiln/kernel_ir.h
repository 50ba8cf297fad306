// Kernel IR: what one compiled executable computes. Fusion emits it, codegen
// lowers it to LLVM IR, the cache hashes its canonical bytes.
//
// A kernel walks an iteration space of `rank` dims; the last `reduce_rank`
// of them are reduced. Sizes, strides, offsets and scalar values are runtime
// arguments (so a new batch size or learning rate compiles nothing); the IR
// holds only what changes the generated code: ranks, dtypes, the expression,
// and per access whether its innermost stride is 1, 0 or anything.
//
//  pointwise kernel (reduce_rank == 0): for every element e of the space,
//      evaluate the stores' values at e and store them. Work unit: element.
//  row kernel (reduce_rank > 0): for every row (a point of the kept dims),
//      run the reductions in order (each a loop over the reduced dims, able to
//      read the results of earlier ones), then one loop over the reduced dims
//      for element-level stores, then the row-level stores. Work unit: row.
//      Softmax is one row kernel: max, sum of exp(x - max), then the store loop.
//
// No torch, no LLVM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::ir {

enum class DType : uint8_t { Bool, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64 };

const char* dtype_name(DType t);
int dtype_size(DType t);
bool is_floating(DType t);
bool is_reduced_float(DType t);  // float16, bfloat16: computed in float32, rounded per op
// The type an op on `t` computes in (eager's opmath type): float32 for the
// reduced floats, `t` otherwise.
DType compute_dtype(DType t);

// clang-format off: one line per group of ops
enum class Op : uint8_t {
  // leaves
  Load,         // arg: access index
  Scalar,       // arg: scalar slot (runtime value)
  Constant,     // imm: a structural constant of the lowering (0.5 in GELU), not a user value
  ReduceValue,  // arg: reduction index (its result for the current row)
  // unary
  Cast, Neg, Abs, Not, BitNot, Exp, Exp2, Expm1, Log, Log1p, Log2, Log10, Sqrt, Rsqrt, Reciprocal,
  Sin, Cos, Tan, Tanh, Sinh, Cosh, Asin, Acos, Atan, Asinh, Acosh, Atanh, Erf, Erfc, Sigmoid,
  Floor, Ceil, Round, Trunc, Sign, IsNan, IsInf,
  // binary
  Add, Sub, Mul, Div, Pow, Atan2,
  MaxEitherNaN, MinEitherNaN,  // torch.maximum/minimum: a NaN in either operand gives NaN
  MaxFirstNaN, MinFirstNaN,    // std::max/min (clamp by a scalar): only a NaN in in[0] passes
  Fmod,
  Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor, BitAnd, BitOr, BitXor, CopySign,
  // ternary
  Where,  // in[0] ? in[1] : in[2]
  Fma,    // in[0] * in[1] + in[2], one rounding (eager's vectorized alpha paths)
  kCount
};
// clang-format on

const char* op_name(Op op);
int op_arity(Op op);  // number of node inputs (leaves: 0)

// One value of the expression DAG. Inputs are indices of earlier nodes.
// Arithmetic nodes take inputs of their own dtype (lowerings insert casts);
// comparisons and IsNan/IsInf produce Bool from inputs of any one dtype.
struct Node {
  Op op = Op::Constant;
  DType dtype = DType::Float32;
  int32_t in[3] = {-1, -1, -1};
  int32_t arg = -1;
  double imm = 0;
  bool operator==(const Node&) const = default;
};

// How an access moves along the innermost dim of the space.
enum class Inner : uint8_t { Contiguous, Broadcast, Strided };

// A strided window of a buffer: element address = offset + sum(index[d] * stride[d]).
struct Access {
  int32_t buffer = 0;  // pointer slot
  DType dtype = DType::Float32;
  Inner inner = Inner::Strided;
  bool row_invariant = false;  // stride 0 along every reduced dim
  bool operator==(const Access&) const = default;
};

enum class ReduceKind : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin, Any, All };
const char* reduce_name(ReduceKind k);

struct Reduction {
  ReduceKind kind = ReduceKind::Sum;
  DType dtype = DType::Float32;  // accumulator and result (Int64 for ArgMax/ArgMin)
  int32_t value = -1;            // node evaluated at every element of the row
  bool operator==(const Reduction&) const = default;
};

struct Store {
  int32_t access = -1;
  int32_t value = -1;  // node; cast to the access dtype by the lowering already
  bool operator==(const Store&) const = default;
};

struct Kernel {
  int rank = 1;
  int reduce_rank = 0;
  int num_buffers = 0;
  std::vector<DType> scalars;  // runtime scalar slots
  std::vector<Access> accesses;
  std::vector<Node> nodes;            // topologically ordered
  std::vector<Reduction> reductions;  // evaluated in order
  std::vector<Store> stores;
  // Write the stores with non-temporal (cache-bypassing) stores. The planner
  // sets it for launches whose output will not stay cached for its reader
  // anyway; only for kernels that can_stream_stores.
  bool streaming_stores = false;
  // KILN_SHAPE_SPECIALIZE: the launch's geometry ints (sizes, offsets and
  // strides: every int before the first scalar slot) as constants of the
  // code, which then serves only that geometry. Empty: read at launch, one
  // kernel for every size.
  std::vector<int64_t> baked_geometry;
  bool operator==(const Kernel&) const = default;

  // Runtime integer arguments (LaunchArgs::ints), in this order:
  //   sizes[rank], then per access: offset, strides[rank], then one slot per
  //   scalar (an integer scalar's value; a floating one's is unused).
  // The layout is written only here: whatever fills the ints (fusion,
  // bind_scalars, tests) or reads them (codegen) places them through these.
  int size_index(int d) const { return d; }
  int offset_index(int access) const { return rank + access * (rank + 1); }
  int stride_index(int access, int d) const { return offset_index(access) + 1 + d; }
  int int_scalar_index(int slot) const { return offset_index(static_cast<int>(accesses.size())) + slot; }
  int ints_count() const { return int_scalar_index(static_cast<int>(scalars.size())); }
  int geometry_ints_count() const { return int_scalar_index(0); }
};

// Whether a node's value is the same at every point of the reduced dims.
std::vector<bool> row_level_nodes(const Kernel& k);

// Whether a kernel may use streaming_stores: pointwise, with every store
// contiguous (whole lines) and to a buffer it does not load (an in-place
// op's lines are in the cache already: there is no read to save).
bool can_stream_stores(const Kernel& k);

// Checks the invariants codegen relies on; throws std::invalid_argument naming
// the first broken one.
void validate(const Kernel& k);

// Readable text (KILN_DUMP_DIR, logs, test failures).
std::string to_text(const Kernel& k);

// Canonical bytes: equal kernels, equal bytes. What the cache key hashes.
std::string serialize(const Kernel& k);

}  // namespace kiln::ir
