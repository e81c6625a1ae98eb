#include "compiler/aot/functionalize.h"

#include <map>

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"

namespace kiln::compiler {
namespace {

// The scalar attribute `name` of an in-place op as a 0-dim tensor value of
// dtype `dt` (read from the same scalar input when it is one).
ValueId scalar_value(Rebuilder& rb, const Node& n, std::string_view name, DType dt, Device dev) {
  Attrs a = Attrs().set("shape", Shape{}).set("dtype", dt).set("device", dev.str());
  std::vector<AttrInput> ai;
  for (const AttrInput& x : n.attr_inputs)
    if (x.attr == name) ai.push_back({"value", x.scalar_index});
  a.set("value", n.attrs.has(name) ? n.attrs.f(name) : 1.0);
  return rb.op(OpId::full, {}, a, ai);
}

// The new value of an in-place op's target, out of place.
ValueId functional_value(Rebuilder& rb, const Graph& g, const Node& n) {
  const ValueType& self = g.type(n.inputs[0]);
  ValueId s = rb.mapped(n.inputs[0]);
  auto in = [&](size_t i) { return rb.mapped(n.inputs[i]); };
  auto fit = [&](ValueId v) {  // cast to self's dtype (in-place ops keep it)
    ValueId r = v;
    if (rb.type(r).dtype != self.dtype) r = rb.op(OpId::cast, {r}, Attrs().set("dtype", self.dtype));
    return r;
  };
  DType compute = self.dtype;
  ValueId r = kNoValue;
  switch (n.op) {
    case OpId::fill_: {
      Attrs a = Attrs().set("shape", self.shape).set("dtype", self.dtype).set("device", self.device.str());
      std::vector<AttrInput> ai;
      for (const AttrInput& x : n.attr_inputs)
        if (x.attr == "value") ai.push_back({"value", x.scalar_index});
      a.set("value", n.attrs.f("value"));
      return rb.op(OpId::full, {}, a, ai);
    }
    case OpId::copy_: {
      ValueId src = in(1);
      if (rb.type(src).shape != self.shape) src = rb.op(OpId::expand, {src}, Attrs().set("shape", self.shape));
      return rb.op(OpId::copy, {src}, Attrs().set("dtype", self.dtype));
    }
    case OpId::add_:
      r = rb.op(OpId::add, {s, rb.op(OpId::mul, {in(1), scalar_value(rb, n, "alpha", compute, self.device)})});
      break;
    case OpId::mul_:
      r = rb.op(OpId::mul, {s, in(1)});
      break;
    case OpId::addcmul_:
      r = rb.op(OpId::add, {s, rb.op(OpId::mul, {rb.op(OpId::mul, {in(1), in(2)}),
                                                   scalar_value(rb, n, "value", compute, self.device)})});
      break;
    case OpId::addcdiv_:
      r = rb.op(OpId::add, {s, rb.op(OpId::mul, {rb.op(OpId::div, {in(1), in(2)}),
                                                   scalar_value(rb, n, "value", compute, self.device)})});
      break;
    case OpId::lerp_:
      r = rb.op(OpId::add, {s, rb.op(OpId::mul, {rb.op(OpId::sub, {in(1), s}),
                                                   scalar_value(rb, n, "weight", compute, self.device)})});
      break;
    default:
      KILN_ASSERT(false, "functionalize: no functional form for '", op_name(n.op), "'");
  }
  return fit(r);
}

}  // namespace

namespace {

// Follows in-place outputs back to the value that was first written.
ValueId written_base(const Graph& g, ValueId v) {
  while (g.values[v].node >= 0) {
    const Node& n = g.nodes[g.values[v].node];
    if (n.kind != NodeKind::Op || op_kind(n.op) != OpKind::Inplace) break;
    v = n.inputs[0];
  }
  return v;
}

// Per node index: whether functionalizing its in-place write is safe. It is
// not when the target is itself a view (the write changes its base), or
// when a view of the target made before the write is read after it (the
// view would keep showing the old data).
std::vector<bool> safe_writes(const Graph& g) {
  const int N = static_cast<int>(g.nodes.size());
  std::vector<int> last_read(g.values.size(), -1);
  for (int i = 0; i < N; ++i)
    for (ValueId in : g.nodes[i].inputs)
      if (in != kNoValue) last_read[in] = i;
  for (ValueId o : g.outputs) last_read[o] = N;
  // Views by the base they alias: (index of the view node, last read of the view).
  std::map<ValueId, std::vector<std::pair<int, int>>> views;
  for (int i = N; i-- > 0;) {  // backwards, so a view's views extend its last read
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Op || op_kind(n.op) != OpKind::View) continue;
    ValueId in = n.inputs[0];
    last_read[in] = std::max(last_read[in], last_read[n.outputs[0]]);
    views[written_base(g, alias_root(g, n.outputs[0]))].push_back({i, last_read[n.outputs[0]]});
  }
  std::vector<bool> safe(N, false);
  for (int i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Op || op_kind(n.op) != OpKind::Inplace) continue;
    ValueId base = written_base(g, n.inputs[0]);
    if (alias_root(g, base) != base && written_base(g, alias_root(g, base)) != base) continue;
    bool ok = g.nodes[g.values[base].node].kind != NodeKind::Op || op_kind(g.nodes[g.values[base].node].op) != OpKind::View;
    for (const auto& [made, read] : views[base]) ok = ok && !(made < i && read > i);
    safe[i] = ok;
  }
  return safe;
}

}  // namespace

int functionalize(Graph& g) {
  Graph out;
  int replaced = 0;
  const std::vector<bool> safe = safe_writes(g);
  // Per graph input (by new id): its latest value, for the copy-back.
  std::map<ValueId, ValueId> latest;
  {
    Rebuilder rb(g, out);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      rb.begin(n);
      ValueId target = n.kind == NodeKind::Op ? n.inputs.empty() ? kNoValue : n.inputs[0] : kNoValue;
      if (!safe[i]) {
        rb.copy_node(n);
        continue;
      }
      ValueId f = functional_value(rb, g, n);
      rb.set(n.outputs[0], f);
      ++replaced;
      // The target may itself be an earlier in-place op's output: find the
      // graph input at the start of the chain.
      ValueId root = written_base(g, target);
      if (g.nodes[g.values[root].node].kind == NodeKind::Input) latest[rb.mapped(root)] = f;
    }
    for (ValueId o : g.outputs) out.outputs.push_back(rb.mapped(o));
  }
  // Copy-backs: the caller observes its inputs.
  for (const auto& [input, value] : latest) {
    ValueType t = out.type(input);
    out.add_op(OpId::copy_, {}, {input, value}, {t});
    out.nodes.back().region = Node::Region::Update;
  }
  g = std::move(out);
  return replaced;
}

}  // namespace kiln::compiler
