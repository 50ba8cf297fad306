// Kernel IR helpers: names, validation, printing and canonical bytes.
#include "kiln/kernel_ir.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace kiln::ir {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "u8";
    case DType::Int8: return "i8";
    case DType::Int16: return "i16";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    case DType::Float32: return "f32";
    case DType::Float64: return "f64";
  }
  return "?";
}

int dtype_size(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  return 0;
}

bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
DType compute_dtype(DType t) { return is_reduced_float(t) ? DType::Float32 : t; }

namespace {
struct OpInfo {
  const char* name;
  int arity;
};
// clang-format off: a table, in Op order
constexpr OpInfo kOps[] = {
    {"load", 0},    {"scalar", 0}, {"const", 0},  {"reduced", 0},
    {"cast", 1},    {"neg", 1},    {"abs", 1},    {"not", 1},     {"bitnot", 1},  {"exp", 1},
    {"exp2", 1},    {"expm1", 1},  {"log", 1},    {"log1p", 1},   {"log2", 1},    {"log10", 1},
    {"sqrt", 1},    {"rsqrt", 1},  {"recip", 1},  {"sin", 1},     {"cos", 1},     {"tan", 1},
    {"tanh", 1},    {"sinh", 1},   {"cosh", 1},   {"asin", 1},    {"acos", 1},    {"atan", 1},
    {"asinh", 1},   {"acosh", 1},  {"atanh", 1},  {"erf", 1},     {"erfc", 1},    {"sigmoid", 1},
    {"floor", 1},   {"ceil", 1},   {"round", 1},  {"trunc", 1},   {"sign", 1},    {"isnan", 1},
    {"isinf", 1},   {"add", 2},    {"sub", 2},    {"mul", 2},     {"div", 2},     {"pow", 2},
    {"atan2", 2},   {"max_either_nan", 2}, {"min_either_nan", 2}, {"max_first_nan", 2}, {"min_first_nan", 2},
    {"fmod", 2},
    {"eq", 2},      {"ne", 2},     {"lt", 2},     {"le", 2},      {"gt", 2},      {"ge", 2},
    {"and", 2},     {"or", 2},     {"xor", 2},    {"bitand", 2},  {"bitor", 2},   {"bitxor", 2},
    {"copysign", 2},{"where", 3},  {"fma", 3},
};
// clang-format on
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(Op::kCount), "kOps must list every Op");

bool is_comparison(Op op) {
  return op == Op::Eq || op == Op::Ne || op == Op::Lt || op == Op::Le || op == Op::Gt || op == Op::Ge ||
         op == Op::IsNan || op == Op::IsInf;
}

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument("invalid kernel IR: " + what); }
}  // namespace

const char* op_name(Op op) { return kOps[static_cast<int>(op)].name; }
int op_arity(Op op) { return kOps[static_cast<int>(op)].arity; }

const char* reduce_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return "sum";
    case ReduceKind::Prod: return "prod";
    case ReduceKind::Max: return "max";
    case ReduceKind::Min: return "min";
    case ReduceKind::ArgMax: return "argmax";
    case ReduceKind::ArgMin: return "argmin";
    case ReduceKind::Any: return "any";
    case ReduceKind::All: return "all";
  }
  return "?";
}

std::vector<bool> row_level_nodes(const Kernel& k) {
  std::vector<bool> row(k.nodes.size(), true);
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const Node& n = k.nodes[i];
    bool r = true;
    if (n.op == Op::Load) r = k.accesses[n.arg].row_invariant;
    for (int j = 0; j < op_arity(n.op); ++j) r = r && row[n.in[j]];
    row[i] = r;
  }
  return row;
}

void validate(const Kernel& k) {
  if (k.rank < 1) invalid("rank must be at least 1");
  if (!k.baked_geometry.empty() && static_cast<int>(k.baked_geometry.size()) != k.geometry_ints_count())
    invalid("baked geometry is not one value per size, offset and stride");
  if (k.reduce_rank < 0 || k.reduce_rank > k.rank) invalid("reduce_rank must be in 0..rank");
  if (k.reduce_rank == 0 && !k.reductions.empty()) invalid("reductions in a kernel without reduced dims");
  for (const Access& a : k.accesses) {
    if (a.buffer < 0 || a.buffer >= k.num_buffers) invalid("access to buffer slot out of range");
  }
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const Node& n = k.nodes[i];
    if (static_cast<int>(n.op) >= static_cast<int>(Op::kCount)) invalid("unknown op");
    for (int j = 0; j < op_arity(n.op); ++j) {
      if (n.in[j] < 0 || n.in[j] >= static_cast<int32_t>(i)) {
        invalid("node " + std::to_string(i) + " (" + op_name(n.op) + ") reads a node that is not before it");
      }
    }
    switch (n.op) {
      case Op::Load:
        if (n.arg < 0 || n.arg >= static_cast<int32_t>(k.accesses.size())) invalid("load of a missing access");
        if (k.accesses[n.arg].dtype != n.dtype) invalid("load dtype differs from its access");
        break;
      case Op::Scalar:
        if (n.arg < 0 || n.arg >= static_cast<int32_t>(k.scalars.size())) invalid("missing scalar slot");
        if (k.scalars[n.arg] != n.dtype) invalid("scalar dtype differs from its slot");
        break;
      case Op::ReduceValue:
        if (n.arg < 0 || n.arg >= static_cast<int32_t>(k.reductions.size())) invalid("missing reduction");
        break;
      case Op::Cast:
      case Op::Constant: break;
      case Op::Where:
        if (k.nodes[n.in[0]].dtype != DType::Bool) invalid("where's condition is not bool");
        if (k.nodes[n.in[1]].dtype != n.dtype || k.nodes[n.in[2]].dtype != n.dtype) invalid("where's branches differ");
        break;
      default:
        if (is_reduced_float(n.dtype)) {
          invalid(std::string(op_name(n.op)) + " computes in a reduced float (cast to float32 first)");
        }
        if (is_comparison(n.op)) {
          if (n.dtype != DType::Bool) invalid("comparison must produce bool");
          if (op_arity(n.op) == 2 && k.nodes[n.in[0]].dtype != k.nodes[n.in[1]].dtype) {
            invalid(std::string(op_name(n.op)) + " compares different dtypes");
          }
        } else {
          for (int j = 0; j < op_arity(n.op); ++j) {
            if (k.nodes[n.in[j]].dtype != n.dtype) {
              invalid("node " + std::to_string(i) + " (" + op_name(n.op) + ") mixes dtypes " +
                      dtype_name(k.nodes[n.in[j]].dtype) + " and " + dtype_name(n.dtype));
            }
          }
        }
    }
  }
  std::vector<bool> row = row_level_nodes(k);
  // The latest reduction each node depends on: a reduction may only read earlier ones.
  std::vector<int32_t> needs(k.nodes.size(), -1);
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const Node& n = k.nodes[i];
    if (n.op == Op::ReduceValue) needs[i] = n.arg;
    for (int j = 0; j < op_arity(n.op); ++j) needs[i] = std::max(needs[i], needs[n.in[j]]);
  }
  for (size_t r = 0; r < k.reductions.size(); ++r) {
    const Reduction& red = k.reductions[r];
    if (red.value < 0 || red.value >= static_cast<int32_t>(k.nodes.size())) invalid("reduction of a missing node");
    if (needs[red.value] >= static_cast<int32_t>(r))
      invalid("reduction r" + std::to_string(r) + " reads itself or a later one");
    if (red.kind != ReduceKind::ArgMax && red.kind != ReduceKind::ArgMin && red.kind != ReduceKind::Any &&
        red.kind != ReduceKind::All && is_reduced_float(red.dtype)) {
      invalid("reductions accumulate in float32 or wider");
    }
  }
  for (const Store& s : k.stores) {
    if (s.access < 0 || s.access >= static_cast<int32_t>(k.accesses.size())) invalid("store to a missing access");
    if (s.value < 0 || s.value >= static_cast<int32_t>(k.nodes.size())) invalid("store of a missing node");
    if (k.nodes[s.value].dtype != k.accesses[s.access].dtype) invalid("store dtype differs from its access");
    if (k.accesses[s.access].row_invariant && k.reduce_rank > 0 && !row[s.value]) {
      invalid("a row-level store of an element-level value");
    }
  }
  if (k.streaming_stores && !can_stream_stores(k)) {
    invalid("streaming stores need a pointwise kernel whose stores are contiguous and to buffers it does not load");
  }
}

bool can_stream_stores(const Kernel& k) {
  if (k.reduce_rank != 0 || k.stores.empty()) return false;
  std::vector<bool> stored(k.num_buffers, false);
  for (const Store& s : k.stores) {
    if (k.accesses[s.access].inner != Inner::Contiguous) return false;
    stored[k.accesses[s.access].buffer] = true;
  }
  for (const Node& n : k.nodes) {
    if (n.op == Op::Load && stored[k.accesses[n.arg].buffer]) return false;
  }
  return true;
}

std::string to_text(const Kernel& k) {
  std::ostringstream os;
  os << "kernel rank=" << k.rank << " reduce_rank=" << k.reduce_rank << " buffers=" << k.num_buffers
     << (k.streaming_stores ? " streaming-stores" : "") << "\n";
  if (!k.baked_geometry.empty()) {
    os << "  baked geometry:";
    for (int64_t v : k.baked_geometry) os << " " << v;
    os << "\n";
  }
  for (size_t i = 0; i < k.scalars.size(); ++i) os << "  scalar s" << i << ": " << dtype_name(k.scalars[i]) << "\n";
  static const char* inner[] = {"contiguous", "broadcast", "strided"};
  for (size_t i = 0; i < k.accesses.size(); ++i) {
    const Access& a = k.accesses[i];
    os << "  access a" << i << ": buffer " << a.buffer << " " << dtype_name(a.dtype)
       << " inner=" << inner[static_cast<int>(a.inner)] << (a.row_invariant ? " row-invariant" : "") << "\n";
  }
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const Node& n = k.nodes[i];
    os << "  %" << i << " = " << op_name(n.op) << "." << dtype_name(n.dtype);
    for (int j = 0; j < op_arity(n.op); ++j) os << " %" << n.in[j];
    switch (n.op) {
      case Op::Load: os << " a" << n.arg; break;
      case Op::Scalar: os << " s" << n.arg; break;
      case Op::ReduceValue: os << " r" << n.arg; break;
      case Op::Constant: os << " " << n.imm; break;
      default: break;
    }
    os << "\n";
  }
  for (size_t i = 0; i < k.reductions.size(); ++i) {
    const Reduction& r = k.reductions[i];
    os << "  r" << i << " = " << reduce_name(r.kind) << "." << dtype_name(r.dtype) << " %" << r.value << "\n";
  }
  for (const Store& s : k.stores) os << "  store a" << s.access << " <- %" << s.value << "\n";
  return os.str();
}

namespace {
void put(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
}  // namespace

std::string serialize(const Kernel& k) {
  std::string out = "kir2";
  put(out, k.rank);
  put(out, k.reduce_rank);
  put(out, k.streaming_stores);
  put(out, k.num_buffers);
  put(out, static_cast<int64_t>(k.scalars.size()));
  for (DType t : k.scalars) put(out, static_cast<int64_t>(t));
  put(out, static_cast<int64_t>(k.accesses.size()));
  for (const Access& a : k.accesses) {
    put(out, a.buffer);
    put(out, static_cast<int64_t>(a.dtype) | static_cast<int64_t>(a.inner) << 8 | int64_t(a.row_invariant) << 16);
  }
  put(out, static_cast<int64_t>(k.nodes.size()));
  for (const Node& n : k.nodes) {
    put(out, static_cast<int64_t>(n.op) | static_cast<int64_t>(n.dtype) << 8);
    for (int j = 0; j < 3; ++j) put(out, n.in[j]);
    put(out, n.arg);
    out.append(reinterpret_cast<const char*>(&n.imm), sizeof(n.imm));
  }
  put(out, static_cast<int64_t>(k.reductions.size()));
  for (const Reduction& r : k.reductions) {
    put(out, static_cast<int64_t>(r.kind) | static_cast<int64_t>(r.dtype) << 8);
    put(out, r.value);
  }
  put(out, static_cast<int64_t>(k.stores.size()));
  for (const Store& s : k.stores) {
    put(out, s.access);
    put(out, s.value);
  }
  // Only where baked: a size-generic kernel's bytes (and cache key) are as
  // before the field existed.
  if (!k.baked_geometry.empty()) {
    out += "geom";
    for (int64_t v : k.baked_geometry) put(out, v);
  }
  return out;
}

}  // namespace kiln::ir
