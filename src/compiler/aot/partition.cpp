#include "compiler/aot/partition.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <unordered_set>

#include "compiler/aot/saved_bytes.h"
#include "compiler/graph/rewrite.h"

namespace kiln::compiler {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

int64_t bytes_of(const ValueType& t) {
  int64_t n = 1;
  for (int64_t s : t.shape) n *= s;
  return n * static_cast<int64_t>(itemsize(t.dtype));
}

bool is_forward_op(const Graph& g, ValueId v) {
  const Value& val = g.values[v];
  if (val.node < 0) return false;
  const Node& n = g.nodes[val.node];
  return n.kind == NodeKind::Op && n.region == Node::Region::Forward;
}

// Dinic's max flow on a small dense-ish graph.
class MaxFlow {
 public:
  explicit MaxFlow(int n) : adj_(n), level_(n), it_(n) {}
  void add_edge(int a, int b, int64_t cap) {
    adj_[a].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({b, cap});
    adj_[b].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({a, 0});
  }
  int64_t run(int s, int t) {
    int64_t flow = 0;
    while (bfs(s, t)) {
      std::fill(it_.begin(), it_.end(), 0);
      while (int64_t f = dfs(s, t, kInf)) flow += f;
    }
    return flow;
  }
  // Nodes reachable from s in the residual graph (the source side of the cut).
  std::vector<bool> source_side(int s) const {
    std::vector<bool> seen(adj_.size(), false);
    std::queue<int> q;
    q.push(s);
    seen[s] = true;
    while (!q.empty()) {
      int a = q.front();
      q.pop();
      for (int e : adj_[a])
        if (edges_[e].cap > 0 && !seen[edges_[e].to]) {
          seen[edges_[e].to] = true;
          q.push(edges_[e].to);
        }
    }
    return seen;
  }

 private:
  struct Edge {
    int to;
    int64_t cap;
  };
  bool bfs(int s, int t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<int> q;
    level_[s] = 0;
    q.push(s);
    while (!q.empty()) {
      int a = q.front();
      q.pop();
      for (int e : adj_[a])
        if (edges_[e].cap > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[a] + 1;
          q.push(edges_[e].to);
        }
    }
    return level_[t] >= 0;
  }
  int64_t dfs(int a, int t, int64_t f) {
    if (a == t) return f;
    for (int& i = it_[a]; i < static_cast<int>(adj_[a].size()); ++i) {
      Edge& e = edges_[adj_[a][i]];
      if (e.cap <= 0 || level_[e.to] != level_[a] + 1) continue;
      int64_t d = dfs(e.to, t, std::min(f, e.cap));
      if (d > 0) {
        e.cap -= d;
        edges_[adj_[a][i] ^ 1].cap += d;
        return d;
      }
    }
    return 0;
  }
  std::vector<std::vector<int>> adj_;
  std::vector<Edge> edges_;
  std::vector<int> level_, it_;
};

}  // namespace

bool recomputable(const Node& node) {
  if (node.kind != NodeKind::Op) return false;
  switch (op_kind(node.op)) {
    case OpKind::Pointwise:
    case OpKind::View:
    case OpKind::Reduction:
    case OpKind::Factory:
      return !has_side_effects(node);
    default:
      return false;  // Extern (conv, matmul), Random, Inplace, Other
  }
}

Partition min_cut_partition(const Graph& g) {
  const int V = static_cast<int>(g.values.size());
  // Forward values the backward reads.
  std::vector<bool> needed(V, false);
  bool any_backward = false;
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::Op || n.region != Node::Region::Backward) continue;
    any_backward = true;
    for (ValueId in : n.inputs)
      if (in != kNoValue && is_forward_op(g, in)) needed[in] = true;
  }
  Partition p;
  if (!any_backward) return p;
  // Network: value v -> nodes 2v (in) and 2v+1 (out); source, sink last.
  const int S = 2 * V, T = 2 * V + 1;
  MaxFlow flow(2 * V + 2);
  for (ValueId v = 0; v < V; ++v) {
    if (!is_forward_op(g, v)) continue;
    const Node& n = g.nodes[g.values[v].node];
    flow.add_edge(2 * v, 2 * v + 1, std::max<int64_t>(bytes_of(g.values[v].type), 1));
    if (!recomputable(n)) flow.add_edge(S, 2 * v, kInf);  // must be computed in the forward
    for (ValueId in : n.inputs)
      if (in != kNoValue && is_forward_op(g, in)) flow.add_edge(2 * in + 1, 2 * v, kInf);
    if (needed[v]) flow.add_edge(2 * v + 1, T, kInf);
  }
  flow.run(S, T);
  std::vector<bool> src = flow.source_side(S);
  std::unordered_set<int> recompute;
  for (ValueId v = 0; v < V; ++v) {
    if (!is_forward_op(g, v)) continue;
    if (src[2 * v] && !src[2 * v + 1]) {
      p.saved.push_back(v);
      p.saved_bytes += bytes_of(g.values[v].type);
    } else if (!src[2 * v]) {
      recompute.insert(g.values[v].node);  // on the sink side: the backward computes it again
    }
  }
  // Only what the backward actually reaches from the saved values is recomputed.
  std::vector<bool> wanted(V, false);
  std::vector<ValueId> stack;
  for (ValueId v = 0; v < V; ++v)
    if (needed[v]) stack.push_back(v);
  std::unordered_set<ValueId> saved_set(p.saved.begin(), p.saved.end());
  while (!stack.empty()) {
    ValueId v = stack.back();
    stack.pop_back();
    if (wanted[v] || saved_set.count(v) || !is_forward_op(g, v)) continue;
    wanted[v] = true;
    for (ValueId in : g.nodes[g.values[v].node].inputs)
      if (in != kNoValue) stack.push_back(in);
  }
  for (int node : recompute) {
    bool any = false;
    for (ValueId o : g.nodes[node].outputs) any = any || wanted[o];
    if (any) p.recomputed_nodes.push_back(node);
  }
  std::sort(p.recomputed_nodes.begin(), p.recomputed_nodes.end());
  return p;
}

int64_t eager_saved_bytes(const Graph& g) {
  std::unordered_set<ValueId> roots;
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::Op || n.region != Node::Region::Forward) continue;
    const OpDef& def = op_def(n.op);
    if (def.backward == nullptr) continue;
    bool records = false;  // autograd records the op when an input requires grad
    for (ValueId in : n.inputs) records = records || (in != kNoValue && g.type(in).requires_grad);
    if (!records) continue;
    auto save = [&](ValueId v) {
      if (v == kNoValue) return;
      ValueId r = alias_root(g, v);
      if (is_forward_op(g, r)) roots.insert(r);
    };
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if ((def.save & kSaveInputs) && !(i < 32 && (def.unsaved_inputs >> i & 1u))) save(n.inputs[i]);
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if ((def.save & kSaveOutputs) && !(i < 32 && (def.unsaved_outputs >> i & 1u))) save(n.outputs[i]);
  }
  int64_t total = 0;
  for (ValueId r : roots) total += bytes_of(g.type(r));
  return total;
}

SavedBytes saved_bytes(const Graph& graph) {
  bool any_backward = false;
  for (const Node& n : graph.nodes) any_backward = any_backward || n.region == Node::Region::Backward;
  if (!any_backward) return {};
  return {eager_saved_bytes(graph), min_cut_partition(graph).saved_bytes};
}

}  // namespace kiln::compiler
