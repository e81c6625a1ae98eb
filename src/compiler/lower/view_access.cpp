// Folding views into indexing (view_access.h).
#include "compiler/lower/view_access.h"

#include <algorithm>

#include "kiln/shape.h"

namespace kiln::compiler::lower {

namespace {

bool is_one(const ValueType& t, size_t d) { return !is_symbolic(t, d) && t.shape[d] == 1; }

// The dims that are not a fixed size 1, in order.
std::vector<size_t> non_unit_dims(const ValueType& t) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (!is_one(t, d)) dims.push_back(d);
  return dims;
}

// Input and output differ only by size-1 dims (squeeze, unsqueeze, a view
// that adds or drops them): the other dims pair up in order.
bool only_unit_dims_differ(const ValueType& in, const ValueType& out) {
  std::vector<size_t> a = non_unit_dims(in), b = non_unit_dims(out);
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (in.shape[a[k]] != out.shape[b[k]] || is_symbolic(in, a[k]) != is_symbolic(out, b[k])) return false;
  return true;
}

bool is_view_op(const Graph& g, ValueId v) {
  const Node& n = g.producer(v);
  return n.kind == NodeKind::Op && op_kind(n.op) == OpKind::View;
}

}  // namespace

std::vector<bool> folded_views(const Graph& g) {
  std::vector<bool> folded(g.values.size(), false);
  // Per value: addressable as a contiguous array of its own shape (a
  // buffer, or a folded reshape, squeeze or unsqueeze of such a value).
  std::vector<bool> contiguous(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v) contiguous[v] = !is_view_op(g, static_cast<ValueId>(v));
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::Op || op_kind(n.op) != OpKind::View || n.outputs.size() != 1) continue;
    const ValueType& in = g.type(n.inputs[0]);
    const ValueType& out = g.type(n.outputs[0]);
    bool folds = false;
    switch (n.op) {
      case OpId::permute:
      case OpId::expand:
        folds = true;
        break;
      case OpId::squeeze:
      case OpId::unsqueeze:
        folds = only_unit_dims_differ(in, out);
        break;
      case OpId::slice:
      case OpId::select: {
        int64_t d = wrap_dim(n.attrs.i("dim"), static_cast<int64_t>(in.shape.size()), op_name(n.op));
        folds = !is_symbolic(in, static_cast<size_t>(d));
        break;
      }
      case OpId::view:
        folds = only_unit_dims_differ(in, out) || contiguous[n.inputs[0]];
        break;
      default:
        break;
    }
    folded[n.outputs[0]] = folds;
    bool keeps_layout = n.op == OpId::view || n.op == OpId::squeeze || n.op == OpId::unsqueeze;
    contiguous[n.outputs[0]] = folds ? keeps_layout && contiguous[n.inputs[0]] : true;
  }
  return folded;
}

Load resolve_load(const Graph& g, const std::vector<bool>& folded, ValueId v, std::vector<IndexExpr> coords) {
  std::vector<IndexExpr> sizes = size_exprs(g.type(v));
  while (folded[v]) {
    const Node& n = g.producer(v);
    ValueId src = n.inputs[0];
    const ValueType& in = g.type(src);
    const ValueType& out = g.type(v);
    std::vector<IndexExpr> c(in.shape.size(), IndexExpr(0));
    switch (n.op) {
      case OpId::permute: {
        const auto& dims = n.attrs.ints("dims");
        for (size_t k = 0; k < dims.size(); ++k)
          c[static_cast<size_t>(wrap_dim(dims[k], static_cast<int64_t>(dims.size()), "permute"))] = coords[k];
        break;
      }
      case OpId::expand:
        c = broadcast_coords(in, out, coords);
        break;
      case OpId::slice: {
        auto d = static_cast<size_t>(wrap_dim(n.attrs.i("dim"), static_cast<int64_t>(in.shape.size()), "slice"));
        int64_t size = in.shape[d], start = n.attrs.i("start");
        if (start < 0) start += size;
        start = std::clamp<int64_t>(start, 0, size);
        c = coords;
        c[d] = coords[d] * IndexExpr(n.attrs.i("step")) + IndexExpr(start);
        break;
      }
      case OpId::select: {
        auto d = static_cast<size_t>(wrap_dim(n.attrs.i("dim"), static_cast<int64_t>(in.shape.size()), "select"));
        int64_t index = n.attrs.i("index");
        if (index < 0) index += in.shape[d];
        c = coords;
        c.insert(c.begin() + static_cast<std::ptrdiff_t>(d), IndexExpr(index));
        break;
      }
      default: {  // squeeze, unsqueeze, view
        if (only_unit_dims_differ(in, out)) {
          std::vector<size_t> a = non_unit_dims(in), b = non_unit_dims(out);
          for (size_t k = 0; k < a.size(); ++k) c[a[k]] = coords[b[k]];
          break;
        }
        // A reshape of a contiguous buffer: the same memory under this
        // view's shape; keep going down to the buffer with these sizes.
        KILN_ASSERT(n.op == OpId::view, "resolve_load: ", op_name(n.op), " folded without a rule");
        while (folded[src]) src = g.producer(src).inputs[0];
        return Load{src, g.type(src).dtype, std::move(coords), std::move(sizes)};
      }
    }
    v = src;
    coords = std::move(c);
    sizes = size_exprs(in);
  }
  return Load{v, g.type(v).dtype, std::move(coords), std::move(sizes)};
}

std::vector<IndexExpr> broadcast_coords(const ValueType& in, const ValueType& out_type,
                                        const std::vector<IndexExpr>& out) {
  size_t lead = out.size() - in.shape.size();
  std::vector<IndexExpr> c(in.shape.size(), IndexExpr(0));
  for (size_t d = 0; d < in.shape.size(); ++d) {
    bool broadcast = is_one(in, d) && !is_one(out_type, d + lead);
    if (!broadcast) c[d] = out[d + lead];
  }
  return c;
}

}  // namespace kiln::compiler::lower
