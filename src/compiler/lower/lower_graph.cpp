// Lowering a graph to the loop IR (lower_graph.h).
#include "compiler/lower/lower_graph.h"

#include "compiler/lower/small_conv.h"
#include "compiler/lower/view_access.h"
#include "kiln/shape.h"

namespace kiln::compiler::lower {

const char* node_lowering_name(NodeLowering l) {
  switch (l) {
    case NodeLowering::None: return "none";
    case NodeLowering::Pointwise: return "pointwise";
    case NodeLowering::Reduction: return "reduction";
    case NodeLowering::FoldedView: return "view";
    case NodeLowering::Extern: return "extern";
  }
  return "?";
}

namespace {

// The buffers a kernel reads and writes. Kernels compute in float32;
// bfloat16 (autocast's activations) is loaded exactly and rounded once per
// node, as the eager kernels do: they convert a bfloat16 op's inputs to
// float32 (numbers too), compute, and round the result (bfloat16_result).
bool kernel_dtype(DType d) { return d == DType::Float32 || d == DType::BFloat16 || d == DType::Bool; }

bool is_scalar_constant(const Graph& g, ValueId v) {
  const Node& p = g.producer(v);
  return p.kind == NodeKind::Constant && p.constant.numel() == 1 && !p.constant.is_meta() &&
         p.constant.device().type == DeviceType::CPU;
}

bool lowers_as_pointwise(const Graph& g, const Node& n) {
  if (op_kind(n.op) != OpKind::Pointwise || !n.attr_inputs.empty() || n.outputs.size() != 1) return false;
  const ValueType& out = g.type(n.outputs[0]);
  if (!kernel_dtype(out.dtype) || out.device.type != DeviceType::CPU) return false;
  if (n.op == OpId::cast && !kernel_dtype(n.attrs.dtype("dtype"))) return false;
  bool has_number = false;
  Tensors metas;
  for (ValueId v : n.inputs) {
    if (v == kNoValue) return false;
    metas.push_back(g.type(v).meta());
    const ValueType& t = g.type(v);
    if (is_scalar_constant(g, v)) {
      has_number = has_number || !kernel_dtype(t.dtype);
      continue;
    }
    if (t.device.type != DeviceType::CPU) return false;
    if (kernel_dtype(t.dtype)) continue;
    // A 0-dim number of another dtype (a C++ number made a graph input:
    // x * 0.5, var + eps, x > 0) takes part in float32 math as the float it
    // converts to, as in the eager kernel.
    bool number = t.shape.empty() && (t.dtype == DType::Float64 || t.dtype == DType::Int64 || t.dtype == DType::Int32);
    if (!number) return false;
    has_number = true;
  }
  if (!has_number) return true;
  const DType result = result_type(metas);
  return result == DType::Float32 || result == DType::BFloat16;
}

bool lowers_as_reduction(const Graph& g, const Node& n) {
  if (n.op != OpId::sum && n.op != OpId::mean && n.op != OpId::amax && n.op != OpId::amin && n.op != OpId::var)
    return false;
  if (!n.attr_inputs.empty() || n.outputs.size() != 1 || n.inputs.size() != 1) return false;
  const ValueType& in = g.type(n.inputs[0]);
  const ValueType& out = g.type(n.outputs[0]);
  auto real = [](DType d) { return d == DType::Float32 || d == DType::BFloat16; };
  return real(in.dtype) && real(out.dtype) && in.device.type == DeviceType::CPU;
}

bool is_unit(const IndexExpr& extent) { return extent.constant() == 1; }

// A loop per dim of the output, named for its dim; a size-1 dim gets no
// loop (its coordinate is 0).
std::vector<Loop> loops_over(const std::vector<IndexExpr>& sizes) {
  std::vector<Loop> loops;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (!is_unit(sizes[d])) loops.push_back({numbered("i", static_cast<int64_t>(d)), sizes[d]});
  return loops;
}

std::vector<IndexExpr> output_coords(const std::vector<IndexExpr>& sizes) {
  std::vector<IndexExpr> c;
  for (size_t d = 0; d < sizes.size(); ++d)
    c.push_back(is_unit(sizes[d]) ? IndexExpr(0) : IndexExpr::symbol(numbered("i", static_cast<int64_t>(d))));
  return c;
}

// A bfloat16 result is rounded where it is computed, not only where it is
// stored: a fused consumer reads the value the eager op would have written.
ScalarExpr bfloat16_result(const ValueType& t, ScalarExpr value) {
  bool rounded = value.op() == ExprOp::Cast && value.cast_dtype() == DType::BFloat16;
  return t.dtype == DType::BFloat16 && !rounded ? ScalarExpr::cast(value, DType::BFloat16) : value;
}

Store store_of(const Graph& g, ValueId v, ScalarExpr value) {
  value = bfloat16_result(g.type(v), std::move(value));
  std::vector<IndexExpr> sizes = size_exprs(g.type(v));
  return Store{v, g.type(v).dtype, output_coords(sizes), sizes, std::move(value)};
}

Kernel lower_pointwise(const Graph& g, const std::vector<bool>& folded, int node_index) {
  const Node& n = g.nodes[static_cast<size_t>(node_index)];
  const ValueType& out = g.type(n.outputs[0]);
  Kernel k;
  k.nodes = {node_index};
  k.loops = loops_over(size_exprs(out));
  std::vector<IndexExpr> coords = output_coords(size_exprs(out));
  std::vector<ScalarExpr> operands;
  for (ValueId v : n.inputs) {
    if (is_scalar_constant(g, v)) {
      // The kernels compute in float32 (or on 0/1): a double number reads
      // as the float it rounds to, as the eager kernel converts it.
      operands.emplace_back(static_cast<double>(static_cast<float>(g.producer(v).constant.item())));
      continue;
    }
    Load load = resolve_load(g, folded, v, broadcast_coords(g.type(v), out, coords));
    operands.push_back(ScalarExpr::input(k.add_load(std::move(load))));
  }
  ScalarExpr formula = pointwise_expr(n.op, n.attrs, static_cast<int>(n.inputs.size()));
  k.stores.push_back(store_of(g, n.outputs[0], map_inputs(formula, [&](int i) { return operands.at(static_cast<size_t>(i)); })));
  return k;
}

Kernel lower_reduction(const Graph& g, const std::vector<bool>& folded, int node_index) {
  const Node& n = g.nodes[static_cast<size_t>(node_index)];
  const ValueType& in = g.type(n.inputs[0]);
  const ValueType& out = g.type(n.outputs[0]);
  auto rank = static_cast<int64_t>(in.shape.size());
  std::vector<int64_t> dims = wrap_dims(n.attrs.ints("dims"), rank, op_name(n.op));
  bool keepdim = n.attrs.b("keepdim");
  Kernel k;
  k.nodes = {node_index};
  k.loops = loops_over(size_exprs(out));
  std::vector<IndexExpr> out_coords = output_coords(size_exprs(out));
  std::vector<IndexExpr> coords;
  std::vector<IndexExpr> reduced_sizes;
  size_t next_out = 0;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (reduced) {
      IndexExpr extent = size_expr(in, static_cast<size_t>(d));
      reduced_sizes.push_back(extent);
      if (is_unit(extent)) {
        coords.emplace_back(0);
      } else {
        std::string var = numbered("r", static_cast<int64_t>(k.reduce_loops.size()));
        k.reduce_loops.push_back({var, extent});
        coords.push_back(IndexExpr::symbol(var));
      }
      if (keepdim) ++next_out;
    } else {
      coords.push_back(out_coords.at(next_out++));
    }
  }
  int x = k.add_load(resolve_load(g, folded, n.inputs[0], std::move(coords)));
  ReduceOp op = n.op == OpId::amax   ? ReduceOp::Max
                : n.op == OpId::amin ? ReduceOp::Min
                : n.op == OpId::var  ? ReduceOp::Welford
                                     : ReduceOp::Sum;
  k.reductions.push_back({op, ScalarExpr::input(x)});
  ScalarExpr result = ScalarExpr::input(kAccumulatorBase);
  // A count as a number: a literal, or an index value when s0 is in it.
  auto number = [&](const IndexExpr& count) {
    if (auto c = count.constant()) return ScalarExpr(static_cast<double>(*c));
    k.index_values.push_back(count);
    return ScalarExpr::input(kIndexValueBase + static_cast<int>(k.index_values.size()) - 1);
  };
  if (n.op == OpId::mean) result = result / number(product(reduced_sizes));
  if (n.op == OpId::var) {
    // M2 / max(N - correction, 0), as the eager kernel divides.
    IndexExpr dof = product(reduced_sizes) - IndexExpr(n.attrs.i("correction"));
    ScalarExpr d = dof.constant() ? ScalarExpr(static_cast<double>(std::max<int64_t>(*dof.constant(), 0)))
                                  : scalar::relu(number(dof));
    result = result / d;
  }
  k.stores.push_back(store_of(g, n.outputs[0], result));
  return k;
}

// A small convolution (small_conv.h) as a reduction over (c, i, j) of
// in[n, c, y + i, x + j] * w[o, c, i, j], plus the bias, then ReLU.
Kernel lower_small_conv(const Graph& g, const std::vector<bool>& folded, int node_index) {
  const Node& n = g.nodes[static_cast<size_t>(node_index)];
  const ValueType& w = g.type(n.inputs[1]);
  Kernel k;
  k.nodes = {node_index};
  std::vector<IndexExpr> out_sizes = size_exprs(g.type(n.outputs[0]));
  k.loops = loops_over(out_sizes);
  std::vector<IndexExpr> o = output_coords(out_sizes);
  std::vector<IndexExpr> r;
  for (size_t d = 1; d < 4; ++d) {
    if (w.shape[d] == 1) {
      r.emplace_back(0);
      continue;
    }
    std::string var = numbered("r", static_cast<int64_t>(k.reduce_loops.size()));
    k.reduce_loops.push_back({var, IndexExpr(w.shape[d])});
    r.push_back(IndexExpr::symbol(var));
  }
  int x = k.add_load(resolve_load(g, folded, n.inputs[0], {o[0], r[0], o[2] + r[1], o[3] + r[2]}));
  int wt = k.add_load(resolve_load(g, folded, n.inputs[1], {o[1], r[0], r[1], r[2]}));
  k.reductions.push_back({ReduceOp::Sum, ScalarExpr::input(x) * ScalarExpr::input(wt)});
  ScalarExpr result = ScalarExpr::input(kAccumulatorBase);
  if (n.inputs.size() > 2 && n.inputs[2] != kNoValue)
    result = result + ScalarExpr::input(k.add_load(resolve_load(g, folded, n.inputs[2], {o[1]})));
  if (n.attrs.has("activation")) result = scalar::relu(result);
  k.stores.push_back(store_of(g, n.outputs[0], result));
  return k;
}

}  // namespace

std::vector<NodeLowering> classify_nodes(const Graph& g) {
  std::vector<bool> folded = folded_views(g);
  std::vector<NodeLowering> kinds;
  for (const Node& n : g.nodes) {
    NodeLowering l = NodeLowering::Extern;
    if (n.kind != NodeKind::Op) l = NodeLowering::None;
    else if (op_kind(n.op) == OpKind::View) l = folded[n.outputs[0]] ? NodeLowering::FoldedView : NodeLowering::Extern;
    else if (lowers_as_pointwise(g, n)) l = NodeLowering::Pointwise;
    else if (lowers_as_reduction(g, n) || lowers_as_small_conv(g, n)) l = NodeLowering::Reduction;
    kinds.push_back(l);
  }
  return kinds;
}

LoopProgram lower_graph(const Graph& g) {
  LoopProgram p;
  p.graph = &g;
  std::vector<bool> folded = folded_views(g);
  std::vector<NodeLowering> kinds = classify_nodes(g);
  p.needs_tensor.assign(g.values.size(), false);
  for (ValueId v : g.outputs) p.needs_tensor[v] = true;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    switch (kinds[i]) {
      case NodeLowering::None: break;
      case NodeLowering::Extern:
        for (ValueId v : n.inputs)
          if (v != kNoValue) p.needs_tensor[v] = true;
        p.steps.push_back({Step::Kind::Extern, static_cast<int>(i), -1});
        break;
      case NodeLowering::FoldedView:
        p.steps.push_back({Step::Kind::View, static_cast<int>(i), -1});
        break;
      case NodeLowering::Pointwise:
      case NodeLowering::Reduction:
        p.kernels.push_back(kinds[i] == NodeLowering::Pointwise ? lower_pointwise(g, folded, static_cast<int>(i))
                            : n.op == OpId::conv2d               ? lower_small_conv(g, folded, static_cast<int>(i))
                                                                 : lower_reduction(g, folded, static_cast<int>(i)));
        p.kernels.back().name = numbered("k", static_cast<int64_t>(p.kernels.size() - 1));
        p.steps.push_back({Step::Kind::Kernel, -1, static_cast<int>(p.kernels.size()) - 1});
        break;
    }
  }
  // A folded view needed as a tensor runs eagerly on a tensor of its input.
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (kinds[i] == NodeLowering::FoldedView && p.needs_tensor[g.nodes[i].outputs[0]])
      p.needs_tensor[g.nodes[i].inputs[0]] = true;
  return p;
}

}  // namespace kiln::compiler::lower
