// Partitioning a trace into regions. The rules are stated, numbered, in
// docs/fusion.md ("Fusion rules"); "rule N" below cites them.
//
// Regions are built greedily, one buffer-sharing component at a time, each
// in trace order. Each keeps its fragment in region numbering as it grows:
// region nodes, the views it loads from memory, its stores. An op joins when
// its iteration space embeds into the region's and no rule refuses it; its
// loads of values the region already stored through the same view become
// those values (forwarding).
#include "fusion/region_builder.h"

#include <algorithm>
#include <stdexcept>

namespace kiln::fusion {
namespace {

// Memory extent of a view over `sizes`, in bytes: [lo, hi). Empty views
// (a zero-size dim) give lo == hi.
std::pair<int64_t, int64_t> extent(const trace::View& v, const std::vector<int64_t>& sizes) {
  int64_t lo = v.offset, hi = v.offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return {0, 0};
    const int64_t span = v.strides[d] * (sizes[d] - 1);
    (span < 0 ? lo : hi) += span;
  }
  const int64_t esz = ir::dtype_size(v.dtype);
  return {lo * esz, (hi + 1) * esz};
}

// A launch storing at least options.stream_min_bytes writes past the cache
// (ir::Kernel::streaming_stores): an output that large would not stay
// cached for its reader anyway, and skipping the read of every line it
// writes saves a third of a copy's memory traffic.
bool streams(const PlannedKernel& k, const Options& options) {
  if (options.stream_min_bytes <= 0 || !ir::can_stream_stores(k.kernel)) return false;
  int64_t bytes_per_element = 0;
  for (const ir::Store& s : k.kernel.stores) bytes_per_element += ir::dtype_size(k.kernel.accesses[s.access].dtype);
  return k.work >= (options.stream_min_bytes + bytes_per_element - 1) / bytes_per_element;
}

bool has_float_sincos(const trace::TraceOp& op) {
  for (const ir::Node& n : op.nodes) {
    if ((n.op == ir::Op::Sin || n.op == ir::Op::Cos) && ir::is_floating(n.dtype) && n.dtype != ir::DType::Float64) {
      return true;
    }
  }
  return false;
}

int64_t floor_mod(int64_t x, int64_t m) { return ((x % m) + m) % m; }

// Whether two views with the same strides address disjoint elements
// although their extents interleave, as the column blocks of one
// [batch, 4 * hidden] buffer do. Ordered by stride, the inner dims cover a
// block narrower than the next stride, every outer stride is a multiple of
// that stride M, and the two blocks land apart modulo M.
bool interleaved_but_disjoint(const trace::View& a, const trace::View& b, const std::vector<int64_t>& sizes) {
  if (a.strides != b.strides || a.dtype != b.dtype) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims that move
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1 || a.strides[d] == 0) continue;
    if (a.strides[d] < 0) return false;
    dims.emplace_back(a.strides[d], sizes[d]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 0;  // elements the inner dims reach past their first
  for (size_t k = 0; k + 1 < dims.size(); ++k) {
    span += dims[k].first * (dims[k].second - 1);
    const int64_t m = dims[k + 1].first;
    if (span >= m) continue;
    bool outer_multiples = true;
    for (size_t e = k + 1; e < dims.size(); ++e) outer_multiples = outer_multiples && dims[e].first % m == 0;
    if (!outer_multiples) continue;
    const int64_t apart = floor_mod(b.offset - a.offset, m);
    if (apart > span && m - apart > span) return true;
  }
  return false;
}

}  // namespace

// Rule 6: which views overlap.
bool RegionBuilder::overlaps(const trace::View& a, const trace::View& b) const {
  if ((*memory_)[a.buffer] != (*memory_)[b.buffer]) return false;
  auto ea = extent(a, sizes_), eb = extent(b, sizes_);
  if (ea.first == ea.second || eb.first == eb.second) return false;
  if (!(ea.first < eb.second && eb.first < ea.second)) return false;
  return !interleaved_but_disjoint(a, b, sizes_);
}

bool RegionBuilder::same_memory_view(const trace::View& a, const trace::View& b) const {
  trace::View in_b = b;
  in_b.buffer = a.buffer;
  return (*memory_)[a.buffer] == (*memory_)[b.buffer] && a == in_b;
}

std::optional<std::vector<int32_t>> RegionBuilder::embed(const trace::TraceOp& op) const {
  const size_t rank = sizes_.size();
  std::vector<int32_t> identity(op.sizes.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int32_t>(i);
  // Rule 4: a reduction over the region's space, over the same dims as its reductions so far.
  if (op.reduced != 0) {
    if (op.sizes == sizes_ && (reduced_ == 0 || reduced_ == op.reduced)) return identity;
    return std::nullopt;
  }
  if (op.sizes == sizes_) return identity;  // rules 1-3: the same iteration space (inputs may broadcast)
  if (reduced_ == 0) return std::nullopt;
  // Rule 4, row-level: the reduced shape with keepdim (reduced dims of size 1) ...
  if (op.sizes.size() == rank) {
    bool keepdim = true;
    for (size_t d = 0; d < rank; ++d) {
      const bool red = (reduced_ >> d) & 1;
      keepdim = keepdim && (red ? op.sizes[d] == 1 : op.sizes[d] == sizes_[d]);
    }
    if (keepdim) return identity;
  }
  // ... or without the reduced dims.
  std::vector<int32_t> map;
  for (size_t d = 0; d < rank; ++d) {
    if (!((reduced_ >> d) & 1)) map.push_back(static_cast<int32_t>(d));
  }
  if (map.size() != op.sizes.size()) return std::nullopt;
  for (size_t i = 0; i < map.size(); ++i) {
    if (op.sizes[i] != sizes_[map[i]]) return std::nullopt;
  }
  return map;
}

trace::View RegionBuilder::to_region(const trace::View& v, const std::vector<int32_t>& map) const {
  trace::View out = v;
  out.strides.assign(sizes_.size(), 0);
  for (size_t i = 0; i < map.size(); ++i) {
    if (sizes_[map[i]] != 1) out.strides[map[i]] = v.strides[i];
  }
  return out;
}

std::string RegionBuilder::try_add(const trace::TraceOp& op, int32_t index, int32_t component) {
  const int num_ops = this->num_ops();
  if (num_ops == 0) {
    sizes_ = op.sizes.vec();
    reduced_ = op.reduced;
    component_ = component;
  } else if (num_ops >= max_ops_) {
    return "size limit";  // rule 8
  }
  auto map = embed(op);
  if (!map) return "iteration space";
  // Rule 10: float sin/cos are exact over the whole float range only in
  // pointwise kernels: those redo a run through libm's double sin/cos when an
  // argument is too large for the float reduction (codegen), a row kernel
  // cannot. So the two do not share a kernel.
  const bool op_sincos = has_float_sincos(op);
  if (num_ops > 0 && ((op.reduced != 0 && has_sincos_) || (op_sincos && reduced_ != 0))) {
    return "float sin/cos stay out of kernels with reductions";
  }

  // Hazards against what earlier ops of the region did (rule 6).
  std::vector<trace::View> loads, stores;
  std::vector<int32_t> forwarded(op.loads.size(), -1);
  for (size_t i = 0; i < op.loads.size(); ++i) {
    trace::View v = to_region(op.loads[i], *map);
    for (auto it = stores_.rbegin(); it != stores_.rend(); ++it) {
      if (it->view == v) {  // rule 1: forwarded from the latest store through this view
        forwarded[i] = it->value;
        break;
      }
      // Rules 5 and 6: a stored value read through another, overlapping view ends the region.
      if (overlaps(it->view, v)) return "read through another view of a value written in the region";
    }
    loads.push_back(std::move(v));
  }
  for (const auto& out : op.stores) {
    trace::View v = to_region(out.view, *map);
    for (const auto& l : memory_loads_) {
      // Rule 7: a write through the very view a value was loaded through keeps the region.
      if (!same_memory_view(l, v) && overlaps(l, v)) return "write over a value the region read through another view";
    }
    for (const auto& s : stores_) {
      if (!same_memory_view(s.view, v) && overlaps(s.view, v)) {
        return "write over a value the region wrote through another view";
      }
    }
    stores.push_back(std::move(v));
  }

  // Rule 9: independent work does not join: ops connected to the region by no
  // chain of shared buffers would only add memory streams to its loop
  // (prefetchers and TLBs lose track past a few dozen) and instructions to its
  // compile.
  if (num_ops > 0 && component != component_) return "no shared data";

  // Commit: the op's fragment in region numbering.
  if (op.reduced != 0) reduced_ = op.reduced;
  has_sincos_ = has_sincos_ || op_sincos;
  std::vector<int32_t> remap(op.nodes.size(), -1);
  const auto reduction_base = static_cast<int32_t>(reductions_.size());
  for (size_t i = 0; i < op.nodes.size(); ++i) {
    ir::Node n = op.nodes[i];
    switch (n.op) {
      case ir::Op::Load:
        if (forwarded[n.arg] >= 0) {
          remap[i] = forwarded[n.arg];
          continue;
        }
        n.arg = memory_load(loads[n.arg]);
        break;
      case ir::Op::Scalar:
        scalars_.push_back(op.scalars[n.arg]);
        scalar_refs_.push_back({index, n.arg});
        n.arg = static_cast<int32_t>(scalars_.size()) - 1;
        break;
      case ir::Op::ReduceValue: n.arg += reduction_base; break;
      default: break;
    }
    for (int j = 0; j < ir::op_arity(n.op); ++j) n.in[j] = remap[n.in[j]];
    nodes_.push_back(n);
    remap[i] = static_cast<int32_t>(nodes_.size()) - 1;
  }
  for (ir::Reduction r : op.reductions) {
    r.value = remap[r.value];
    reductions_.push_back(r);
  }
  for (size_t i = 0; i < op.stores.size(); ++i) {
    stores_.push_back({stores[i], remap[op.stores[i].value], index});
  }
  ops_.push_back(index);
  return "";
}

int32_t RegionBuilder::memory_load(const trace::View& v) {
  for (size_t i = 0; i < memory_loads_.size(); ++i) {
    if (memory_loads_[i] == v) return static_cast<int32_t>(i);
  }
  memory_loads_.push_back(v);
  return static_cast<int32_t>(memory_loads_.size()) - 1;
}

Region RegionBuilder::region(std::string ended_by) const {
  Region r;
  r.ops = ops_;
  r.sizes = sizes_;
  r.reduced = reduced_;
  r.ended_by = std::move(ended_by);
  return r;
}

// Rule 9: the component of each op: ops linked by a chain of shared buffers,
// over the whole trace (union-find). One parameter's optimizer update is one
// component, the next parameter's another, although the two never share a
// buffer.
std::vector<int32_t> components(const trace::Trace& trace) {
  std::vector<int32_t> parent(trace.buffers.size());
  for (size_t i = 0; i < parent.size(); ++i) parent[i] = static_cast<int32_t>(i);
  auto find = [&](int32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  auto first_buffer = [](const trace::TraceOp& op) {
    return op.loads.empty() ? op.stores.at(0).view.buffer : op.loads[0].buffer;
  };
  // An output in memory it took from another buffer follows that buffer's reads.
  for (size_t i = 0; i < trace.buffers.size(); ++i) {
    if (trace.buffers[i].memory_of >= 0) parent[find(static_cast<int32_t>(i))] = find(trace.buffers[i].memory_of);
  }
  for (const auto& op : trace.ops) {
    const int32_t root = find(first_buffer(op));
    for (const auto& v : op.loads) parent[find(v.buffer)] = root;
    for (const auto& o : op.stores) parent[find(o.view.buffer)] = root;
  }
  // Numbered in order of first appearance.
  std::vector<int32_t> number(trace.buffers.size(), -1), out;
  int32_t next = 0;
  for (const auto& op : trace.ops) {
    int32_t& id = number[find(first_buffer(op))];
    if (id < 0) id = next++;
    out.push_back(id);
  }
  return out;
}

// Rule 9: op indices grouped by component (components in order of first
// appearance), trace order within each. Components share no buffer, so this
// order gives every op the same inputs as trace order does.
std::vector<int32_t> component_order(const std::vector<int32_t>& component) {
  std::vector<int32_t> order(component.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return component[a] < component[b]; });
  return order;
}

Plan plan(const trace::Trace& trace, const Options& options) {
  Plan out;
  std::vector<RegionBuilder> built;
  std::vector<int32_t> memory(trace.buffers.size());
  for (size_t i = 0; i < memory.size(); ++i) {
    memory[i] = trace.buffers[i].memory_of >= 0 ? trace.buffers[i].memory_of : static_cast<int32_t>(i);
  }
  RegionBuilder current(options.max_ops, memory);
  const std::vector<int32_t> component = components(trace);
  for (int32_t i : component_order(component)) {
    std::string refused = current.try_add(trace.ops[i], i, component[i]);
    if (refused.empty()) continue;
    out.regions.push_back(current.region(refused));
    built.push_back(std::move(current));
    current = RegionBuilder(options.max_ops, memory);
    std::string again = current.try_add(trace.ops[i], i, component[i]);
    if (!again.empty()) throw std::logic_error("kiln fusion: an op cannot start a region: " + again);
  }
  if (current.num_ops() > 0) {
    out.regions.push_back(current.region("end of trace"));
    built.push_back(std::move(current));
  }

  // Rule 11: stores to dead buffers are dropped unless some region (any, even
  // one whose stores all die) loads them from memory.
  std::vector<bool> materialize(trace.buffers.size(), false);
  for (const auto& b : built) {
    for (const auto& v : b.memory_loads()) {
      if (trace.buffers[v.buffer].dead) materialize[v.buffer] = true;
    }
  }
  for (size_t r = 0; r < built.size(); ++r) {
    std::vector<bool> keep;
    for (const auto& s : built[r].stores()) {
      const trace::Buffer& b = trace.buffers[s.view.buffer];
      const bool kept = !b.dead || materialize[s.view.buffer];
      keep.push_back(kept);
      if (!kept) out.bytes_not_written += built[r].store_bytes(s);
    }
    auto k = built[r].build(keep, materialize);
    if (k) {
      k->region = static_cast<int32_t>(r);
      k->kernel.streaming_stores = streams(*k, options);
      out.kernels.push_back(std::move(*k));
    }
  }
  std::vector<int32_t> scratch_of(trace.buffers.size(), -1);  // index into out.scratch
  for (size_t i = 0; i < trace.buffers.size(); ++i) {
    if (!materialize[i]) continue;
    scratch_of[i] = static_cast<int32_t>(out.scratch.size());
    out.scratch.push_back({static_cast<int32_t>(i), -1, -1});
  }
  for (size_t k = 0; k < out.kernels.size(); ++k) {
    for (int32_t id : out.kernels[k].buffer_ids) {
      if (scratch_of[id] < 0) continue;
      Plan::Scratch& s = out.scratch[scratch_of[id]];
      if (s.first_kernel < 0) s.first_kernel = static_cast<int32_t>(k);
      s.last_kernel = static_cast<int32_t>(k);
    }
  }
  // A materialized buffer keeps its writer's store, so its writer's kernel names it: every span is set.
  return out;
}

}  // namespace kiln::fusion
