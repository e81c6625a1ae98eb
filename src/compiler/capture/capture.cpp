// Capture: the dispatch mode behind kiln::compile (include/kiln/compile.h).
//
// While a compiled function runs, every op call reaches CaptureMode before
// autograd. Tracing records a graph node and hands back placeholders (meta
// tensors with the output's shape, dtype, device and strides); replay checks
// the call against the next recorded one (op, attributes, where each input
// came from) and hands back placeholders the same way, without re-tracing.
// When the function returns, or when it reads a computed value (a graph
// break), the segment's graph runs on the real inputs and the placeholders
// still alive get the results' memory.
//
// Tensors that reach an op from outside the graph (the function's
// arguments, parameters, optimizer state, C++ numbers wrapped as tensors)
// are graph inputs, bound by position on every call and checked against the
// recorded types (the guards). Step attributes (learning rates, seeds) and,
// with dynamic=true, shape attributes holding the batch size are read from
// each call as scalar inputs. backward() on a captured value derives the
// gradients with the ops' derivative entries as more nodes of the same
// graph, so forward, backward and the optimizer update form one graph.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.h"
#include "compiler/aot/functionalize.h"
#include "compiler/backend/cpp_executable.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/passes/float32_regions.h"
#include "compiler/passes/pipeline.h"
#include "compiler/log.h"
#include "compiler/graph/printer.h"
#include "kiln/ops.h"
#include "ops/conv_autotune.h"
#include "ops/dispatch_mode.h"
#include "ops/meta_mode.h"

namespace kiln::compiler {

bool RecordedCall::same_call(const RecordedCall& o) const {
  if (op != o.op || inputs != o.inputs || free_attrs != o.free_attrs) return false;
  if (attrs.items().size() != o.attrs.items().size()) return false;
  for (size_t i = 0; i < attrs.items().size(); ++i) {
    const auto& [name, value] = attrs.items()[i];
    if (name != o.attrs.items()[i].first) return false;
    bool is_free = std::find(free_attrs.begin(), free_attrs.end(), name) != free_attrs.end();
    if (!is_free && !(value == o.attrs.items()[i].second)) return false;
  }
  return true;
}

namespace {

bool contains(const std::vector<std::string_view>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Attributes equal except the free ones.
bool attrs_match(const RecordedCall& rc, const Attrs& attrs) {
  const auto& a = rc.attrs.items();
  const auto& b = attrs.items();
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return false;
    if (!(a[i].second == b[i].second) && !contains(rc.free_attrs, a[i].first)) return false;
  }
  return true;
}

const AttrValue* find_attr(const Attrs& attrs, std::string_view name) {
  for (const auto& [n, v] : attrs.items())
    if (n == name) return &v;
  return nullptr;
}

// A meta tensor with t's shape, strides and offset: what a view of an
// outside tensor is computed on, so the view is a placeholder too.
Tensor meta_like(const Tensor& t) {
  Tensor m = Tensor::meta(t.shape(), t.dtype(), t.device(), t.strides());
  if (t.offset() != 0) {
    auto storage = std::make_shared<Storage>(t.impl()->storage->nbytes(), t.device(), Storage::Meta{});
    m.impl()->storage = storage;
    m.impl()->offset = t.offset();
  }
  m.impl()->wrapped_number = t.impl()->wrapped_number;
  return m;
}

class CaptureMode;
thread_local CaptureMode* t_active = nullptr;

class CaptureMode final : public DispatchMode {
 public:
  CaptureMode(CompiledState& state, uint64_t key, std::vector<const TensorImpl*> args)
      : st_(state), key_(key), args_(std::move(args)) {}
  const char* mode_name() const override { return "capture"; }

  // Picks the first variant for this key, or records a new one.
  void begin() {
    for (auto& v : st_.variants) {
      if (v->key == key_ && v->complete) {
        var_ = v.get();
        tried_.insert(var_);
        recording_ = false;
        return;
      }
    }
    start_variant("first call with these arguments");
  }

  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    if (op_kind(id) == OpKind::Composite) return next(id, inputs, attrs);  // constituents come back
    // A mismatch moves to another variant that shares what ran so far (each
    // tried once per call) or starts recording a new one.
    while (!recording_) {
      std::string why = replay_mismatch(id, inputs, attrs);
      if (why.empty()) return replay_call(id, inputs, attrs);
      diverge(why, id);
    }
    return record_call(id, inputs, attrs);
  }

  // A read of a placeholder's data: a graph break.
  void on_data_access(const Tensor& t, const char* what, const SourceLocation& where) {
    if (!is_ours(t)) return;
    std::string loc = source_location_str(where);
    if (st_.options.fullgraph()) {
      KILN_FAIL("graph break in '", st_.options.name(), "' (fullgraph=true): ", what, " at ", loc,
                " reads a value the graph computes (", dtype_name(t.dtype()), shape_str(t.shape()),
                "); keep the value as a tensor (use where/masks instead of branching on it), or compile with "
                "fullgraph(false) to split the graph there");
    }
    Segment& s = seg();
    ValueId read = find_value(t);
    std::string op = read != kNoValue && s.graph.values[read].node >= 0 &&
                             s.graph.producer(read).kind == NodeKind::Op
                         ? op_name(s.graph.producer(read).op)
                         : "input";
    if (recording_) {
      s.ends_in_break = true;
      s.break_what = what;
      s.break_op = op;
      s.break_where = loc;
      ++st_.stats.graph_breaks;
      log_once(LogCategory::GraphBreaks, st_.options.name() + "@" + loc,
               "graph break in '" + st_.options.name() + "': " + what + " of " + op + " at " + loc +
                   " reads a computed value; the graph so far runs and capture goes on in a new graph");
    } else if (!(s.ends_in_break && call_idx_ == s.calls.size())) {
      diverge(std::string("a graph break (") + what + " at " + loc + ") where the recorded graph has none", {});
      s.ends_in_break = true;
      s.break_what = what;
      s.break_op = op;
      s.break_where = loc;
      ++st_.stats.graph_breaks;
    }
    run_segment();
    next_segment();
  }

  // backward() on a captured value: derivatives as graph nodes.
  bool on_backward(const Tensors& roots, const Tensors& grads, bool retain_graph) {
    for (const Tensor& r : roots)
      if (!is_ours(r)) return false;  // a real tensor: the eager engine runs (its ops are captured)
    capture_backward(roots, grads);
    return true;
  }

  // The function returned: run the last segment.
  void finish() {
    Segment& s = seg();
    if (!recording_ && call_idx_ != s.calls.size()) {
      diverge("the function returned after " + std::to_string(call_idx_) + " of " +
                  std::to_string(s.calls.size()) + " recorded ops",
              {});
    }
    if (!recording_ && seg_idx_ + 1 != var_->segments.size()) diverge("the function returned before a recorded graph break", {});
    run_segment();
    var_->complete = true;
    if (recording_) {
      log_event(LogCategory::Graphs, "graph of '" + st_.options.name() + "' (variant " +
                                         std::to_string(st_.variants.size()) + ", " +
                                         std::to_string(var_->segments.size()) + " segment(s)):\n" + graphs_str());
    }
  }

 private:
  Segment& seg() { return *var_->segments[seg_idx_]; }

  bool is_ours(const Tensor& t) const {
    if (!t.defined() || !t.is_meta()) return false;
    return const_cast<CaptureMode*>(this)->find_value(t) != kNoValue;
  }

  // The value a tensor stands for: a placeholder, or an alias of one made
  // without an op (detach() shares storage and metadata).
  ValueId find_value(const Tensor& t) {
    auto it = value_of_.find(t.impl());
    if (it != value_of_.end()) {
      // Entries outlive their tensors; an address may be reused.
      if (it->second.tensor.lock().get() == t.impl()) return it->second.value;
      value_of_.erase(it);
    }
    if (!t.is_meta()) return kNoValue;
    auto st = values_of_storage_.find(t.impl()->storage.get());
    if (st == values_of_storage_.end()) return kNoValue;
    for (ValueId v : st->second) {
      auto p = placeholders_[v].lock();
      if (p && same_metadata(p.get(), t.impl())) {
        remember(t, v);
        return v;
      }
    }
    return kNoValue;
  }

  static bool same_metadata(const TensorImpl* a, const TensorImpl* b) {
    return a->storage == b->storage && a->shape == b->shape && a->strides == b->strides && a->offset == b->offset &&
           a->dtype == b->dtype;
  }

  std::string graphs_str() const {
    std::string out;
    for (const auto& s : var_->segments) out += print(s->graph);
    return out;
  }

  // ---- variants ----

  void start_variant(const std::string& reason) {
    auto v = std::make_unique<Variant>();
    v->key = key_;
    v->segments.push_back(std::make_shared<Segment>());
    v->segments.back()->graph.name = st_.options.name();
    note_new_variant(reason);
    st_.variants.push_back(std::move(v));
    var_ = st_.variants.back().get();
    recording_ = true;
  }

  void note_new_variant(const std::string& reason) {
    ++st_.stats.variants;
    if (st_.stats.variants > 1) {
      ++st_.stats.recompiles;
      log_event(LogCategory::Recompiles, "recompiling '" + st_.options.name() + "' (variant " +
                                             std::to_string(st_.stats.variants) + "): " + reason);
    }
    if (st_.stats.variants >= st_.options.recompile_limit() && !st_.stats.fell_back) {
      st_.stats.fell_back = true;
      st_.stats.fallback_reason = "recompile limit (" + std::to_string(st_.options.recompile_limit()) +
                                  ") reached; last reason: " + reason;
      log_once(LogCategory::Recompiles, "fallback:" + st_.options.name(),
               "'" + st_.options.name() + "' runs eagerly from now on: " + st_.stats.fallback_reason);
    }
  }

  // Replay met a call the variant did not record: continue with a variant
  // that shares what ran so far, or record a new one from here.
  void diverge(const std::string& reason, std::optional<OpId> at) {
    std::string why = at ? std::string(op_name(*at)) + ": " + reason : reason;
    Segment& cur = seg();
    for (auto& v : st_.variants) {
      if (v.get() == var_ || v->key != key_ || !v->complete || v->segments.size() <= seg_idx_) continue;
      bool same = std::equal(var_->segments.begin(), var_->segments.begin() + seg_idx_, v->segments.begin());
      const Segment& cand = *v->segments[seg_idx_];
      same = same && cand.calls.size() > call_idx_;
      for (size_t j = 0; same && j < call_idx_; ++j) same = cand.calls[j].same_call(cur.calls[j]);
      if (same && &cand != &cur && !tried_.count(v.get())) {
        tried_.insert(v.get());
        var_ = v.get();
        prepare_replay();  // same prefix, same value ids; sizes for the rest
        return;
      }
    }
    // A new variant: the segments so far, and the current one cut at this call.
    auto v = std::make_unique<Variant>();
    v->key = key_;
    v->segments.assign(var_->segments.begin(), var_->segments.begin() + seg_idx_);
    v->segments.push_back(truncated(cur, call_idx_));
    log_event(LogCategory::Guards, "guard failed in '" + st_.options.name() + "': " + why);
    note_new_variant(why);
    st_.variants.push_back(std::move(v));
    var_ = st_.variants.back().get();
    recording_ = true;
    rebuild_maps();
  }

  // The segment's first n calls (their nodes, inputs and scalars).
  std::shared_ptr<Segment> truncated(const Segment& s, size_t n) {
    auto out = std::make_shared<Segment>();
    out->calls.assign(s.calls.begin(), s.calls.begin() + n);
    const Graph& g = s.graph;
    Graph& h = out->graph;
    h.name = g.name;
    int last_node = -1;
    for (size_t j = 0; j < n; ++j)
      for (ValueId o : s.calls[j].outputs) last_node = std::max(last_node, g.values[o].node);
    // Nodes up to the last op node of the kept calls; inputs used after it go.
    int num_values = 0;
    for (int k = 0; k <= last_node; ++k) {
      const Node& node = g.nodes[k];
      h.nodes.push_back(node);
      for (ValueId o : node.outputs) num_values = std::max(num_values, o + 1);
    }
    h.values.assign(g.values.begin(), g.values.begin() + num_values);
    for (ValueId in : g.inputs)
      if (in < num_values) h.inputs.push_back(in);
    int num_scalars = 0;
    for (const Node& node : h.nodes)
      for (const AttrInput& ai : node.attr_inputs) num_scalars = std::max(num_scalars, ai.scalar_index + 1);
    h.scalar_inputs.assign(g.scalar_inputs.begin(), g.scalar_inputs.begin() + num_scalars);
    out->has_backward = backward_in_segment_;
    bound_.resize(h.inputs.size());
    scalars_.resize(h.scalar_inputs.size());
    placeholders_.resize(h.values.size());
    raw_.resize(h.values.size());
    return out;
  }

  // After switching from replay to recording: the impl -> value maps.
  void rebuild_maps() {
    input_of_.clear();
    for (size_t k = 0; k < bound_.size(); ++k)
      if (bound_[k].defined()) input_of_[bound_[k].impl()] = static_cast<int>(k);
  }

  // ---- replay ----

  // Empty when the call matches the next recorded one.
  std::string replay_mismatch(OpId id, const Tensors& inputs, const Attrs& attrs) {
    const Segment& s = seg();
    if (call_idx_ >= s.calls.size())
      return s.ends_in_break ? "an op where the recorded graph breaks" : "more ops than recorded";
    const RecordedCall& rc = s.calls[call_idx_];
    if (rc.op != id) return std::string("recorded '") + op_name(rc.op) + "' here";
    if (!attrs_match(rc, attrs)) return "attributes " + attrs.str() + ", recorded " + rc.attrs.str();
    if (rc.inputs.size() != inputs.size()) return "another number of inputs";
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Binding& b = rc.inputs[i];
      const Tensor& t = inputs[i];
      switch (b.kind) {
        case Binding::None:
          if (t.defined()) return "input " + std::to_string(i) + " is given, recorded absent";
          break;
        case Binding::Value:
          if (!t.defined()) return "input " + std::to_string(i) + " is absent";
          if (raw_[b.index] != t.impl()) {
            auto p = placeholders_[b.index].lock();
            if (!p || !same_metadata(p.get(), t.impl())) return "input " + std::to_string(i) + " comes from elsewhere";
          }
          break;
        case Binding::External: {
          if (!t.defined() || t.is_meta()) return "input " + std::to_string(i) + " is not the recorded outside tensor";
          if (bound_[b.index].defined()) {
            if (bound_[b.index].impl() != t.impl()) return "input " + std::to_string(i) + " is another tensor";
            break;
          }
          const ValueType& ty = s.graph.type(s.graph.inputs[b.index]);
          if (!matches_type(t, ty, s0_) || t.strides() != ty.strides || t.requires_grad() != ty.requires_grad)
            return "input " + std::to_string(i) + " is " + type_str(ValueType::of(t)) + ", recorded " + type_str(ty);
          break;
        }
      }
    }
    return {};
  }

  Tensors replay_call(OpId id, Tensors& inputs, const Attrs& attrs) {
    const Segment& s = seg();
    const RecordedCall& rc = s.calls[call_idx_];
    for (size_t i = 0; i < inputs.size(); ++i)
      if (rc.inputs[i].kind == Binding::External && !bound_[rc.inputs[i].index].defined())
        bound_[rc.inputs[i].index] = inputs[i];
    const Node& node = s.graph.producer(rc.outputs[0]);
    for (const AttrInput& ai : node.attr_inputs) scalars_[ai.scalar_index] = *find_attr(attrs, ai.attr);
    Tensors out = placeholders_for(id, inputs, attrs);
    for (size_t k = 0; k < rc.outputs.size(); ++k) {
      set_placeholder(rc.outputs[k], out[k]);
      remember(out[k], rc.outputs[k]);
      if (out[k].is_meta() && s.graph.type(rc.outputs[k]).requires_grad) out[k].impl()->requires_grad = true;
    }
    ++call_idx_;
    return out;
  }

  // ---- recording ----

  Tensors record_call(OpId id, Tensors& inputs, const Attrs& attrs) {
    Segment& s = seg();
    Graph& g = s.graph;
    const OpDef& def = op_def(id);
    RecordedCall rc;
    rc.op = id;
    rc.attrs = attrs;
    std::vector<ValueId> in_values;
    bool any_symbolic = false, any_grad = false;
    for (const Tensor& t : inputs) {
      Binding b;
      ValueId v = kNoValue;
      if (t.defined()) {
        ValueId found = find_value(t);
        if (found != kNoValue) {
          b = {Binding::Value, found};
          v = found;
          // scalar_tensor marks its full's output as a wrapped number after
          // the op returned: the type learns it at the first use.
          if (t.impl()->wrapped_number) g.values[v].type.wrapped_number = true;
        } else {
          KILN_CHECK(!t.is_meta(), op_name(id), ": a meta tensor ", dtype_name(t.dtype()), shape_str(t.shape()),
                     " from outside reached a compiled function; pass real tensors");
          auto jt = input_of_.find(t.impl());
          int k;
          if (jt != input_of_.end()) {
            k = jt->second;
          } else {
            ValueType ty = ValueType::of(t);
            bool is_arg = std::find(args_.begin(), args_.end(), t.impl()) != args_.end();
            if (st_.options.dynamic() && is_arg && t.dim() > 0 && (s0_ < 0 || s0_ == t.size(0))) {
              s0_ = t.size(0);
              ty.symbolic_dims |= 1u;
            }
            v = g.add_input(ty);
            k = static_cast<int>(g.inputs.size()) - 1;
            input_of_[t.impl()] = k;
            bound_.push_back(t);
          }
          b = {Binding::External, k};
          v = g.inputs[k];
        }
        const ValueType& ty = g.type(v);
        any_symbolic = any_symbolic || ty.symbolic_dims != 0;
        any_grad = any_grad || ty.requires_grad;
      }
      rc.inputs.push_back(b);
      in_values.push_back(v);
    }
    // Step attributes, and with dynamic shapes the int lists holding the
    // batch size, are scalar inputs.
    std::vector<AttrInput> attr_inputs;
    for (const auto& [name, value] : attrs.items()) {
      bool step = contains(def.step_attrs, name);
      bool symbolic = false;
      if (!step && any_symbolic && s0_ > 0) {
        if (const auto* ints = std::get_if<std::vector<int64_t>>(&value))
          symbolic = std::find(ints->begin(), ints->end(), s0_) != ints->end();
      }
      if (!step && !symbolic) continue;
      int k = g.add_scalar_input(std::string(name), value);
      scalars_.push_back(value);
      attr_inputs.push_back({name, k});
      rc.free_attrs.push_back(name);
    }
    Tensors out = placeholders_for(id, inputs, attrs);
    std::vector<ValueType> types;
    const bool differentiable = def.backward != nullptr && grad_mode_enabled() && any_grad;
    for (size_t k = 0; k < out.size(); ++k) {
      ValueType ty = ValueType::of(out[k]);
      ty.requires_grad = differentiable && static_cast<int>(k) < def.num_differentiable_outputs &&
                         is_floating(ty.dtype);
      if (any_symbolic && s0_ > 0)
        for (size_t d = 0; d < ty.shape.size() && d < 64; ++d)
          if (ty.shape[d] == s0_) ty.symbolic_dims |= uint64_t{1} << d;
      types.push_back(ty);
    }
    rc.outputs = g.add_op(id, attrs, in_values, types, attr_inputs);
    g.nodes.back().region = in_backward_ ? Node::Region::Backward
                            : s.has_backward ? Node::Region::Update
                                             : Node::Region::Forward;
    for (size_t k = 0; k < out.size(); ++k) {
      set_placeholder(rc.outputs[k], out[k]);
      remember(out[k], rc.outputs[k]);
      if (types[k].requires_grad && out[k].is_meta()) out[k].impl()->requires_grad = true;
    }
    s.calls.push_back(std::move(rc));
    ++call_idx_;
    return out;
  }

  // ---- placeholders ----

  Tensors placeholders_for(OpId id, const Tensors& inputs, const Attrs& attrs) {
    OpKind kind = op_kind(id);
    if (kind == OpKind::View && inputs[0].defined() && !inputs[0].is_meta()) {
      Tensors shadow = inputs;
      shadow[0] = meta_like(inputs[0]);
      return meta_outputs(id, shadow, attrs);
    }
    if (kind == OpKind::Inplace) {
      meta_outputs(id, inputs, attrs);  // validates shapes and dtypes now, as eager would
      return {inputs[0]};
    }
    Tensors out = meta_outputs(id, inputs, attrs);
    for (Tensor& t : out)
      if (!t.is_meta()) t = meta_like(t);  // a view fn on a meta input gives meta already
    return out;
  }

  void remember(const Tensor& t, ValueId v) { value_of_[t.impl()] = {v, t.impl_ptr()}; }

  void set_placeholder(ValueId v, const Tensor& t) {
    if (placeholders_.size() <= static_cast<size_t>(v)) {
      placeholders_.resize(v + 1);
      raw_.resize(v + 1, nullptr);
    }
    placeholders_[v] = t.impl_ptr();
    raw_[v] = t.impl();
    if (t.is_meta()) values_of_storage_[t.impl()->storage.get()].push_back(v);
  }

  Tensor placeholder(ValueId v) {
    if (auto p = placeholders_[v].lock()) return Tensor(p);
    // Dropped by the user but needed (a derivative reads it): a fresh one.
    const ValueType& ty = seg().graph.type(v);
    Tensor t = ty.meta();
    set_placeholder(v, t);
    remember(t, v);
    revived_.push_back(t);
    return t;
  }

  // ---- backward ----

  void capture_backward(const Tensors& roots, const Tensors& grads) {
    Segment& s = seg();
    const Graph& g = s.graph;
    s.has_backward = true;
    backward_in_segment_ = true;
    in_backward_ = true;
    struct EndBackward {
      bool& flag;
      ~EndBackward() { flag = false; }
    } end_backward{in_backward_};
    NoGradGuard no_grad;  // gradients are values, not differentiable themselves
    std::unordered_map<ValueId, Tensor> grad_of;
    for (size_t r = 0; r < roots.size(); ++r) {
      ValueId v = find_value(roots[r]);
      KILN_CHECK(g.type(v).requires_grad, "backward: the tensor ", dtype_name(roots[r].dtype()),
                 shape_str(roots[r].shape()), " does not require grad; call requires_grad_() on a leaf it depends on");
      Tensor gr = grads.size() > r ? grads[r] : Tensor();
      if (!gr.defined()) {
        KILN_CHECK(roots[r].numel() == 1, "backward: grad can be implicit only for a one-element tensor, got ",
                   shape_str(roots[r].shape()));
        gr = ones_like(roots[r]);
      }
      grad_of[v] = gr;
    }
    const size_t n = call_idx_;
    for (size_t j = n; j-- > 0;) {
      const RecordedCall rc = s.calls[j];  // a copy: derivative calls append to s.calls
      const OpDef& def = op_def(rc.op);
      if (def.backward == nullptr) continue;
      Tensors gouts;
      bool any = false;
      for (ValueId o : rc.outputs) {
        auto it = grad_of.find(o);
        gouts.push_back(it != grad_of.end() ? it->second : Tensor());
        any = any || it != grad_of.end();
      }
      if (!any) continue;
      Tensors ins;
      std::vector<TensorMeta> metas;
      std::vector<bool> needs;
      bool any_needed = false;
      for (const Binding& b : rc.inputs) {
        if (b.kind == Binding::None) {
          ins.emplace_back();
          metas.emplace_back();
          needs.push_back(false);
          continue;
        }
        ValueId v = b.kind == Binding::Value ? b.index : g.inputs[b.index];
        const ValueType& ty = g.type(v);
        ins.push_back(b.kind == Binding::Value ? placeholder(v) : bound_[b.index]);
        metas.push_back({ty.shape, ty.dtype, ty.device});
        needs.push_back(ty.requires_grad);
        any_needed = any_needed || ty.requires_grad;
      }
      if (!any_needed) continue;
      Tensors outs;
      for (ValueId o : rc.outputs) outs.push_back(placeholder(o));
      BackwardCtx ctx{ins, outs, metas, rc.attrs, needs};
      Tensors gins = def.backward(ctx, gouts);
      for (size_t i = 0; i < rc.inputs.size() && i < gins.size(); ++i) {
        if (!needs[i] || !gins[i].defined()) continue;
        const Binding& b = rc.inputs[i];
        ValueId v = b.kind == Binding::Value ? b.index : g.inputs[b.index];
        auto it = grad_of.find(v);
        if (it == grad_of.end()) grad_of[v] = gins[i];
        else it->second = add(it->second, gins[i]);
      }
    }
    // Leaves get .grad (accumulated as eager does); outside tensors with a
    // history pass their gradient on to the eager engine, whose derivative
    // ops are captured too.
    Tensors outer_roots, outer_grads;
    for (size_t k = 0; k < bound_.size(); ++k) {
      auto it = grad_of.find(g.inputs[k]);
      if (it == grad_of.end() || !bound_[k].requires_grad()) continue;
      Tensor& t = bound_[k];
      if (t.is_leaf()) {
        Tensor old = t.grad();
        t.set_grad(old.defined() ? add(old, it->second) : it->second);
      } else {
        outer_roots.push_back(t);
        outer_grads.push_back(it->second);
      }
    }
    revived_.clear();
    if (!outer_roots.empty()) {
      autograd::BackwardHookGuard real_engine(nullptr);
      autograd::run_backward(outer_roots, outer_grads, false);
    }
  }

  // ---- running a segment ----

  void run_segment() {
    Segment& s = seg();
    Graph& g = s.graph;
    // Outputs: the computed values whose placeholders are still held.
    // A tensor written in place stands for several values (the write's
    // input and output): it takes the last one.
    std::vector<ValueId> live;
    std::unordered_set<const TensorImpl*> taken;
    bool needs_tape = false;
    for (size_t v = placeholders_.size(); v-- > 0;) {
      auto p = placeholders_[v].lock();
      if (p && p->storage->is_meta() && raw_[v] == p.get() && taken.insert(p.get()).second) {
        live.push_back(static_cast<ValueId>(v));
        needs_tape = needs_tape || g.type(static_cast<ValueId>(v)).requires_grad;
      }
    }
    std::reverse(live.begin(), live.end());
    if (recording_) {
      g.outputs = live;
      s.reset_executables();
    } else {
      bool missing = false;
      for (ValueId v : live) missing = missing || std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end();
      if (missing) {
        for (ValueId v : live)
          if (std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end()) g.outputs.push_back(v);
        s.reset_executables();
      }
    }
    // A backward captured into the graph needs no tape; a forward whose
    // outputs need gradients runs its forward graph and attaches the
    // backward graph split from it ahead of time (the eager tape over the
    // graph's ops when the split is refused), both built with the graph's
    // executables. Grad mode is part of the variant's key and the outputs
    // only change through reset_executables, so `grad` holds for every run
    // of what is built below.
    const bool grad = grad_enabled_ && needs_tape && !s.has_backward;
    if (!s.interpreter) {
      // The pipeline: functionalize, then the graph passes. Inputs, scalar
      // inputs and outputs keep their positions.
      s.executable = g;
      std::vector<Pass> passes = {{"functionalize", [](Graph& x) { functionalize(x); }}};
      for (Pass& p : default_passes(st_.options.mode())) passes.push_back(std::move(p));
      run_passes(s.executable, passes);
      s.differentiable = s.executable;
      if (grad) {
        HideModeGuard below_capture(*this);
        build_aot(s);
      }
      // bf16 autocast: the graph as autocast wrote it, in float32 (a choice
      // recorded on this machine), or both, timed (precision_trial.h). Not
      // for a forward split ahead of time: it runs the split graphs
      // (autocast's, with the per-layer choices), never the whole one.
      PrecisionPlan plan = s.aot ? PrecisionPlan{} : plan_precision(s.differentiable, st_.options.backend());
      if (plan.kind == PrecisionPlan::Float32) s.executable = std::move(plan.float32);
      else run_passes(s.executable, execution_passes());
      if (plan.kind == PrecisionPlan::Trial && count_bfloat16_layers(s.executable) == 0) plan = {};
      if (recording_)
        log_event(LogCategory::Aot, "'" + st_.options.name() + "' after functionalization and passes:\n" +
                                        print(s.executable));
      s.precision = std::move(plan.note);
      if (!s.precision.empty()) st_.stats.precision = s.precision;
      s.interpreter = make_executable(s.executable, st_.options.backend());
      if (plan.kind == PrecisionPlan::Trial) {
        // An executable keeps a reference to its graph: built where the graph stays.
        s.precision_trial =
            std::make_unique<PrecisionTrial>(std::move(plan.key), float32_everywhere(s.differentiable));
        s.precision_trial->float32_executable = make_executable(s.precision_trial->float32_graph, st_.options.backend());
      }
    }
    Tensors results;
    {
      HideModeGuard below_capture(*this);
      NoGradGuard off;
      set_grad_mode(grad && !s.aot);
      const bool aot = grad && s.aot;
      PrecisionTrial* trial = s.precision_trial.get();
      const GraphExecutable& exec =
          trial && trial->next() == GraphPrecision::Float32 ? *trial->float32_executable : *s.interpreter;
      const auto start = st_.time_graph_runs || trial ? std::chrono::steady_clock::now()
                                                      : std::chrono::steady_clock::time_point{};
      TensorSpan ins(bound_.data(), g.inputs.size());
      std::span<const AttrValue> scalars(scalars_.data(), g.scalar_inputs.size());
      results = aot ? s.aot->run(ins, scalars) : exec.run(ins, scalars);
      const int64_t ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
      if (st_.time_graph_runs) st_.graph_run_ns += ns;
      if (trial) {
        uint64_t sizes = 0;
        for (const Tensor& t : ins)
          for (int64_t d : t.shape()) detail::hash_mix(sizes, static_cast<uint64_t>(d));
        trial->ran(static_cast<double>(ns) * 1e-9, sizes);
        if (trial->decided()) settle_precision(s);
      }
    }
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      auto p = placeholders_[g.outputs[k]].lock();
      if (!p || !p->storage->is_meta()) continue;
      const Tensor& r = results[k];
      p->storage->materialize(r.impl_ptr()->storage);
      p->offset = r.offset();
      p->strides = r.strides();
      p->requires_grad = false;
      if (r.impl()->grad_fn) {
        p->grad_fn = r.impl()->grad_fn;
        p->output_nr = r.impl()->output_nr;
      }
    }
  }

  // The precision trial's end: the faster graph stays, the other goes, and
  // the choice is recorded for the next process on this machine.
  void settle_precision(Segment& s) {
    PrecisionTrial& t = *s.precision_trial;
    const bool float32 = t.winner() == GraphPrecision::Float32;
    conv_autotune::record(t.key(), float32 ? "float32" : "bf16");
    s.precision = t.summary();
    st_.stats.precision = s.precision;
    log_event(LogCategory::Precision, "graph '" + s.graph.name + "': " + s.precision);
    if (float32) {
      // Built again on the graph's new place (its kernels from the cache).
      s.executable = std::move(t.float32_graph);
      s.interpreter = make_executable(s.executable, st_.options.backend());
    }
    s.precision_trial.reset();
  }

  void build_aot(Segment& s) {
    std::optional<ForwardBackward> fb = split_forward_backward(s.differentiable, &s.aot_refused, st_.options.mode());
    if (!fb) {
      log_event(LogCategory::Aot, "'" + st_.options.name() + "' keeps the eager tape for its backward: " + s.aot_refused);
      return;
    }
    log_event(LogCategory::Aot, "'" + st_.options.name() + "' split ahead of time: the backward keeps " +
                                    std::to_string(fb->num_saved) + " values, " +
                                    std::to_string(fb->partition.saved_bytes) + " bytes (eager autograd: " +
                                    std::to_string(eager_saved_bytes(s.differentiable)) + ")\n" + print(fb->forward) +
                                    print(fb->backward));
    const std::string backend = st_.options.backend();
    s.aot = std::make_unique<AotRunner>(std::move(*fb), [backend](const Graph& g) { return make_executable(g, backend); });
  }

  void next_segment() {
    ++seg_idx_;
    call_idx_ = 0;
    backward_in_segment_ = false;
    bound_.clear();
    scalars_.clear();
    placeholders_.clear();
    raw_.clear();
    value_of_.clear();
    values_of_storage_.clear();
    input_of_.clear();
    if (recording_) {
      var_->segments.push_back(std::make_shared<Segment>());
      var_->segments.back()->graph.name = st_.options.name() + "_" + std::to_string(seg_idx_);
    } else if (seg_idx_ >= var_->segments.size()) {
      --seg_idx_;
      diverge("ops after the last recorded graph", {});
    } else {
      bound_.resize(seg().graph.inputs.size());
      scalars_.resize(seg().graph.scalar_inputs.size());
      placeholders_.resize(seg().graph.values.size());
      raw_.resize(seg().graph.values.size(), nullptr);
    }
  }

 public:
  void prepare_replay() {
    if (recording_) return;
    bound_.resize(std::max(bound_.size(), seg().graph.inputs.size()));
    scalars_.resize(std::max(scalars_.size(), seg().graph.scalar_inputs.size()));
    placeholders_.resize(std::max(placeholders_.size(), seg().graph.values.size()));
    raw_.resize(std::max(raw_.size(), seg().graph.values.size()), nullptr);
  }
  bool grad_enabled_ = true;

 private:
  CompiledState& st_;
  uint64_t key_;
  std::vector<const TensorImpl*> args_;
  Variant* var_ = nullptr;
  bool recording_ = true;
  size_t seg_idx_ = 0, call_idx_ = 0;
  bool backward_in_segment_ = false;
  bool in_backward_ = false;  // recording derivative nodes  // this call captured a backward into the current segment
  int64_t s0_ = -1;
  // The current segment's run: inputs by position, scalars, placeholders by value.
  Tensors bound_;
  std::vector<AttrValue> scalars_;
  std::vector<std::weak_ptr<TensorImpl>> placeholders_;
  std::vector<const TensorImpl*> raw_;
  struct Known {
    ValueId value;
    std::weak_ptr<TensorImpl> tensor;
  };
  std::unordered_map<const TensorImpl*, Known> value_of_;
  std::unordered_map<const TensorImpl*, int> input_of_;
  std::unordered_map<const Storage*, std::vector<ValueId>> values_of_storage_;
  Tensors revived_;
  std::unordered_set<const Variant*> tried_;  // variants switched to in this call
};

void data_access_hook(const Tensor& t, const char* what, const SourceLocation& where) {
  if (t_active != nullptr) t_active->on_data_access(t, what, where);
}
bool backward_hook(const Tensors& roots, const Tensors& grads, bool retain_graph) {
  return t_active != nullptr && t_active->on_backward(roots, grads, retain_graph);
}

}  // namespace
}  // namespace kiln::compiler

namespace kiln::detail {

struct ActiveCapture {
  std::unique_ptr<compiler::CaptureMode> mode;
  std::unique_ptr<ModeGuard> guard;
  compiler::CaptureMode* prev_active = nullptr;
  MetaDataAccessHook prev_hook = nullptr;
  autograd::BackwardHook prev_backward = nullptr;
};
thread_local std::vector<ActiveCapture> t_captures;

std::shared_ptr<compiler::CompiledState> make_compiled_state(const CompileOptions& options) {
  KILN_CHECK(options.backend() == "interpreter" || options.backend() == "cpp", "compile: backend \"",
             options.backend(), "\" is not available yet; use \"interpreter\" or \"cpp\"");
  KILN_CHECK(options.mode() == "default" || options.mode() == "reduce-overhead" || options.mode() == "max-autotune",
             "compile: mode must be \"default\", \"reduce-overhead\" or \"max-autotune\", got \"", options.mode(), "\"");
  KILN_CHECK(options.recompile_limit() >= 1, "compile: recompile_limit must be >= 1, got ", options.recompile_limit());
  return std::make_shared<compiler::CompiledState>(options);
}

CompileStats stats_of(const compiler::CompiledState& state) { return state.stats; }

CompileCall::CompileCall(compiler::CompiledState& state, uint64_t key, std::vector<const TensorImpl*> tensor_args)
    : state_(state) {
  ++state.stats.calls;
  if (state.stats.fell_back || compiler::t_active != nullptr) {
    // Fallen back, or called from inside another compiled function (its ops
    // are captured there).
    eager_ = true;
    if (state.stats.fell_back) ++state.stats.eager_calls;
    return;
  }
  hash_mix(key, grad_mode_enabled() ? 3 : 5);
  ActiveCapture a;
  a.mode = std::make_unique<compiler::CaptureMode>(state, key, std::move(tensor_args));
  a.mode->grad_enabled_ = grad_mode_enabled();
  a.mode->begin();
  a.mode->prepare_replay();
  a.guard = std::make_unique<ModeGuard>(*a.mode);
  a.prev_active = compiler::t_active;
  compiler::t_active = a.mode.get();
  a.prev_hook = set_meta_data_access_hook(&compiler::data_access_hook);
  a.prev_backward = autograd::set_backward_hook(&compiler::backward_hook);
  t_captures.push_back(std::move(a));
}

namespace {
void uninstall() {
  ActiveCapture& a = t_captures.back();
  autograd::set_backward_hook(a.prev_backward);
  set_meta_data_access_hook(a.prev_hook);
  compiler::t_active = a.prev_active;
  a.guard.reset();
}
}  // namespace

void CompileCall::finish() {
  if (eager_) return;
  finished_ = true;
  ActiveCapture& a = t_captures.back();
  try {
    a.mode->finish();
  } catch (...) {
    uninstall();
    t_captures.pop_back();
    throw;
  }
  uninstall();
  t_captures.pop_back();
}

CompileCall::~CompileCall() {
  if (eager_ || finished_) return;
  // The function threw: drop the capture (its placeholders stay meta) and
  // any variant it was recording.
  uninstall();
  t_captures.pop_back();
  std::erase_if(state_.variants, [](const auto& v) { return !v->complete; });
}

}  // namespace kiln::detail
