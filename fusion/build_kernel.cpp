// A grown region -> Kernel IR plus its launch arguments.
//
// Only what the kept stores need is emitted. Dims are ordered kept-then-
// reduced, size-1 dims dropped and neighbours merged where every view allows
// (a contiguous tensor of any shape becomes rank 1), so that one kernel
// serves every shape with the same layout pattern.
#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "fusion/region_builder.h"

namespace kiln::fusion {

int64_t RegionBuilder::store_bytes(const StoreRef& s) const {
  int64_t n = ir::dtype_size(s.view.dtype);
  for (size_t d = 0; d < sizes_.size(); ++d) {
    if (s.view.strides[d] != 0) n *= sizes_[d];
  }
  return n;
}

std::optional<PlannedKernel> RegionBuilder::build(const std::vector<bool>& keep,
                                                  const std::vector<bool>& scratch) const {
  // 1. What the kept stores need.
  std::vector<bool> needed(nodes_.size(), false), reduction_needed(reductions_.size(), false);
  std::vector<int32_t> stack;
  for (size_t i = 0; i < stores_.size(); ++i) {
    if (keep[i]) stack.push_back(stores_[i].value);
  }
  if (stack.empty()) return std::nullopt;  // rule 11: every store died, no kernel
  while (!stack.empty()) {
    const int32_t id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = true;
    const ir::Node& n = nodes_[id];
    for (int j = 0; j < ir::op_arity(n.op); ++j) stack.push_back(n.in[j]);
    if (n.op == ir::Op::ReduceValue && !reduction_needed[n.arg]) {
      reduction_needed[n.arg] = true;
      stack.push_back(reductions_[n.arg].value);
    }
  }

  // 2. The views that take part, in region coordinates.
  std::vector<trace::View> views;
  auto view_index = [&](const trace::View& v) {
    for (size_t i = 0; i < views.size(); ++i) {
      if (views[i] == v) return static_cast<int32_t>(i);
    }
    views.push_back(v);
    return static_cast<int32_t>(views.size()) - 1;
  };
  std::vector<int32_t> load_view(memory_loads_.size(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (needed[i] && nodes_[i].op == ir::Op::Load) load_view[nodes_[i].arg] = view_index(memory_loads_[nodes_[i].arg]);
  }
  std::vector<int32_t> store_view(stores_.size(), -1);
  for (size_t i = 0; i < stores_.size(); ++i) {
    if (keep[i]) store_view[i] = view_index(stores_[i].view);
  }

  // 3. Dims: kept then reduced (rule 4's row kernel), size-1 dropped, mergeable neighbours merged.
  struct Dim {
    int64_t size;
    bool reduced;
    std::vector<int64_t> strides;  // per view
  };
  std::vector<Dim> dims;
  bool any_reduction = false;
  for (bool r : reduction_needed) any_reduction |= r;
  // Rule 11: with every reduction dead the reduced dims still matter: a store
  // of the epilogue (one element per row, stride 0 along them) must run once
  // per row, not once per element along them, since it may read what it
  // writes (`y.mul_(2)` fused after a `max` whose result was freed).
  auto moves_along_reduced = [&](const trace::View& v) {
    for (size_t d = 0; d < sizes_.size(); ++d) {
      if (((reduced_ >> d) & 1) && sizes_[d] != 1 && v.strides[d] != 0) return true;
    }
    return false;
  };
  bool element_views = false, row_stores = false;
  for (const auto& v : views) element_views |= moves_along_reduced(v);
  for (size_t i = 0; i < stores_.size(); ++i) row_stores |= keep[i] && !moves_along_reduced(stores_[i].view);
  // Iterated as reduced dims (a row kernel, epilogue stores once per row),
  // left out (nothing moves along them), or as plain dims (no epilogue store).
  const bool rows = any_reduction || (element_views && row_stores);
  const bool drop_reduced = !rows && !element_views;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < sizes_.size(); ++d) {
      const bool in_reduced = (reduced_ >> d) & 1;
      if (in_reduced && drop_reduced) continue;
      const bool red = in_reduced && rows;
      if (red != (pass == 1) || sizes_[d] == 1) continue;
      Dim dim{sizes_[d], red, {}};
      for (const auto& v : views) dim.strides.push_back(v.strides[d]);
      if (!dims.empty() && dims.back().reduced == red) {
        Dim& prev = dims.back();
        bool mergeable = true;
        for (size_t v = 0; v < views.size(); ++v) mergeable &= prev.strides[v] == dim.strides[v] * dim.size;
        if (mergeable) {
          prev.size *= dim.size;
          prev.strides = dim.strides;
          continue;
        }
      }
      dims.push_back(std::move(dim));
    }
    if (pass == 1 && rows && (dims.empty() || !dims.back().reduced)) {
      dims.push_back({1, true, std::vector<int64_t>(views.size(), 0)});
    }
  }
  if (dims.empty()) dims.push_back({1, false, std::vector<int64_t>(views.size(), 0)});

  PlannedKernel out;
  ir::Kernel& k = out.kernel;
  k.rank = static_cast<int>(dims.size());
  k.reduce_rank = 0;
  for (const Dim& d : dims) k.reduce_rank += d.reduced ? 1 : 0;

  // 4. Accesses and pointer slots: one slot per allocation. An output in
  // memory it took from another buffer (rule 11) shares that buffer's slot,
  // unless it was given scratch memory of its own: codegen takes different
  // slots for different memory (its alias scopes; a run computed twice,
  // Lowering::may_rerun) and must see that the two are one.
  auto slot_buffer = [&](int32_t b) { return scratch[b] ? b : (*memory_)[b]; };
  for (size_t v = 0; v < views.size(); ++v) {
    const int32_t buffer = slot_buffer(views[v].buffer);
    int32_t slot = -1;
    for (size_t s = 0; s < out.buffer_ids.size(); ++s) {
      if (out.buffer_ids[s] == buffer) slot = static_cast<int32_t>(s);
    }
    if (slot < 0) {
      out.buffer_ids.push_back(buffer);
      slot = static_cast<int32_t>(out.buffer_ids.size()) - 1;
    }
    ir::Access a;
    a.buffer = slot;
    a.dtype = views[v].dtype;
    const int64_t inner = dims.back().strides[v];
    a.inner = inner == 1 ? ir::Inner::Contiguous : inner == 0 ? ir::Inner::Broadcast : ir::Inner::Strided;
    a.row_invariant = true;
    for (const Dim& d : dims) {
      if (d.reduced && d.strides[v] != 0) a.row_invariant = false;
    }
    k.accesses.push_back(a);
  }
  k.num_buffers = static_cast<int>(out.buffer_ids.size());

  // 5. Nodes, renumbered; scalars and reductions that are used.
  std::vector<int32_t> remap(nodes_.size(), -1), scalar_slot(scalars_.size(), -1);
  std::vector<int32_t> reduction_slot(reductions_.size(), -1);
  for (size_t r = 0; r < reductions_.size(); ++r) {
    if (reduction_needed[r])
      reduction_slot[r] =
          static_cast<int32_t>(std::count(reduction_needed.begin(), reduction_needed.begin() + r, true));
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!needed[i]) continue;
    ir::Node n = nodes_[i];
    for (int j = 0; j < ir::op_arity(n.op); ++j) n.in[j] = remap[n.in[j]];
    if (n.op == ir::Op::Load) n.arg = load_view[n.arg];
    if (n.op == ir::Op::ReduceValue) n.arg = reduction_slot[n.arg];
    if (n.op == ir::Op::Scalar) {
      k.scalars.push_back(scalars_[n.arg].type);
      out.scalars.push_back(scalars_[n.arg].f);
      out.scalar_refs.push_back(scalar_refs_[n.arg]);
      scalar_slot[n.arg] = static_cast<int32_t>(k.scalars.size()) - 1;
      n.arg = scalar_slot[n.arg];
    }
    k.nodes.push_back(n);
    remap[i] = static_cast<int32_t>(k.nodes.size()) - 1;
  }
  for (size_t r = 0; r < reductions_.size(); ++r) {
    if (!reduction_needed[r]) continue;
    ir::Reduction red = reductions_[r];
    red.value = remap[red.value];
    k.reductions.push_back(red);
  }
  for (size_t i = 0; i < stores_.size(); ++i) {
    if (keep[i]) k.stores.push_back({store_view[i], remap[stores_[i].value]});
  }

  // 6. Launch arguments, placed by the kernel's layout (ir::Kernel::ints_count).
  out.ints.assign(k.ints_count(), 0);
  for (int d = 0; d < k.rank; ++d) out.ints[k.size_index(d)] = dims[d].size;
  for (int a = 0; a < static_cast<int>(views.size()); ++a) {
    out.ints[k.offset_index(a)] = views[a].offset;
    for (int d = 0; d < k.rank; ++d) out.ints[k.stride_index(a, d)] = dims[d].strides[a];
  }
  for (size_t s = 0; s < scalars_.size(); ++s) {
    if (scalar_slot[s] >= 0) out.ints[k.int_scalar_index(scalar_slot[s])] = scalars_[s].i;
  }
  out.work = out.unit_elements = 1;
  for (const Dim& d : dims) (d.reduced ? out.unit_elements : out.work) *= d.size;
  // An empty space is never compiled or launched (the engine skips work 0),
  // and its dims say nothing of which values are row-level: a view expanded
  // over a size-0 dim may be both.
  if (out.work == 0) return out;
  ir::validate(k);
  return out;
}

}  // namespace kiln::fusion
