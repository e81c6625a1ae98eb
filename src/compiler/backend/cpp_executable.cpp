// Running a graph on generated C++ kernels (cpp_executable.h).
#include "compiler/backend/cpp_executable.h"

#include <algorithm>
#include <iostream>

#include "compiler/codegen/cpp/jit_compiler.h"
#include "compiler/codegen/cpp/render_c_like.h"
#include "compiler/codegen/cpp/render_cpp.h"
#include "compiler/log.h"
#include "compiler/lower/lower_graph.h"
#include "compiler/lower/merge_loops.h"
#include "compiler/passes/pipeline.h"
#include "compiler/schedule/fuse_horizontal.h"
#include "compiler/schedule/fuse_vertical.h"
#include "compiler/schedule/hoist_fills.h"
#include "compiler/schedule/parallel_regions.h"
#include "compiler/schedule/store_copy_backs.h"
#include "kiln/profile.h"

namespace kiln::compiler {

using lower::Step;

namespace {

using MemoryRange = std::pair<const char*, const char*>;  // [begin, end)

struct KernelCall {
  std::vector<void*> pointers;
  std::vector<Tensor> held;                            // contiguous copies live through the call
  std::vector<std::pair<Tensor, Tensor>> copy_backs;   // (destination, value; undefined: stored in place)
  std::vector<MemoryRange> written, read;
};

// Whether kernels of one region must not run side by side: one writes
// memory another reads or writes, or one has a copy-back into a
// non-contiguous destination (memory not one range).
bool overlapping(const std::vector<KernelCall>& calls) {
  auto meet = [](const MemoryRange& a, const MemoryRange& b) { return a.first < b.second && b.first < a.second; };
  for (const KernelCall& c : calls)
    for (const auto& copy_back : c.copy_backs)
      if (copy_back.second.defined()) return true;
  for (size_t i = 0; i < calls.size(); ++i)
    for (const MemoryRange& w : calls[i].written)
      for (size_t j = 0; j < calls.size(); ++j) {
        if (j == i) continue;
        for (const MemoryRange& x : calls[j].written)
          if (meet(w, x)) return true;
        for (const MemoryRange& x : calls[j].read)
          if (meet(w, x)) return true;
      }
  return false;
}

}  // namespace

CppExecutable::CppExecutable(const Graph& g) : g_(g), reference_(g), program_(lower::lower_graph(g)) {
  schedule::fuse_vertical(program_);
  if (!pass_disabled("hoist_fills")) schedule::hoist_fills(program_);
  schedule::fuse_horizontal(program_);
  if (!pass_disabled("store_copy_backs")) schedule::store_copy_backs(program_);
  lower::merge_loops(program_);
  if (!pass_disabled("parallel_regions")) schedule::group_parallel_regions(program_, codegen::kParallelThreshold);
  if (dump_enabled("loops"))
    std::cerr << "// ---- loops of graph " << g.name << " (" << program_.kernels.size() << " kernels) ----\n"
              << print(program_) << std::flush;
  if (!program_.kernels.empty()) {
    source_ = codegen::render_cpp(program_);
    if (dump_enabled("kernels")) std::cerr << "// ---- kernels of graph " << g.name << " ----\n" << source_ << std::flush;
    module_ = codegen::compile_cpp(source_);
    for (const lower::Kernel& k : program_.kernels) {
      functions_.push_back(module_->symbol<KernelFn>(codegen::kernel_symbol(k)));
      kernel_names_.push_back(g.name + "/" + k.name);
      buffers_.push_back(codegen::kernel_buffers(k));
      std::vector<Argument> args;
      for (ValueId v : buffers_.back()) {
        Argument a;
        a.value = v;
        a.stored = std::any_of(k.stores.begin(), k.stores.end(), [&](const lower::Store& x) { return x.buffer == v; });
        if (a.stored && !program_.stored_into.empty()) a.into = program_.stored_into[static_cast<size_t>(v)];
        const ValueType& t = g.type(v);
        a.shape = t.shape;
        for (size_t d = 0; d < t.shape.size(); ++d)
          if (is_symbolic(t, d)) a.symbolic_dims.push_back(d);
        a.dtype = t.dtype;
        a.device = t.device;
        a.wrapped_number = t.wrapped_number;
        args.push_back(std::move(a));
      }
      arguments_.push_back(std::move(args));
    }
    for (size_t r = 0; r < program_.regions.size(); ++r) {
      region_functions_.push_back(module_->symbol<RegionFn>(codegen::region_symbol(r)));
      region_names_.push_back(g.name + "/" + lower::numbered("r", static_cast<int64_t>(r)));
    }
  }
  region_of_kernel_.assign(program_.kernels.size(), kNoRegion);
  for (size_t r = 0; r < program_.regions.size(); ++r)
    for (size_t j = 0; j < program_.regions[r].size(); ++j)
      region_of_kernel_[static_cast<size_t>(program_.regions[r][j])] = j == 0 ? static_cast<int>(r) : kRegionMember;
  // The last step reading each value; graph outputs live on.
  std::vector<int> last_use(g.values.size(), -1);
  for (size_t s = 0; s < program_.steps.size(); ++s) {
    const Step& st = program_.steps[s];
    std::vector<ValueId> reads;
    if (st.kind == Step::Kind::Kernel) {
      reads = buffers_[static_cast<size_t>(st.kernel)];
      for (const Argument& a : arguments_[static_cast<size_t>(st.kernel)])
        if (a.into != kNoValue) reads.push_back(a.into);
    } else {
      reads = g.nodes[static_cast<size_t>(st.node)].inputs;
    }
    for (ValueId v : reads)
      if (v != kNoValue) last_use[static_cast<size_t>(v)] = static_cast<int>(s);
  }
  for (ValueId v : g.outputs) last_use[static_cast<size_t>(v)] = static_cast<int>(program_.steps.size());
  free_after_.resize(program_.steps.size());
  for (size_t v = 0; v < g.values.size(); ++v)
    if (last_use[v] >= 0 && static_cast<size_t>(last_use[v]) < program_.steps.size())
      free_after_[static_cast<size_t>(last_use[v])].push_back(static_cast<ValueId>(v));
}

CppExecutable::~CppExecutable() = default;

bool CppExecutable::records_gradients(TensorSpan inputs) const {
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  for (const Node& n : g_.nodes)
    if (n.kind == NodeKind::Constant && n.constant.defined() && n.constant.requires_grad()) return true;
  return false;
}

Tensors CppExecutable::run(TensorSpan inputs, std::span<const AttrValue> scalars) const {
  if (grad_mode_enabled() && records_gradients(inputs)) return reference_.run(inputs, scalars);
  reference_.check_inputs(inputs);
  std::vector<AttrValue> scalar = reference_.scalar_values(scalars);
  int64_t s0 = -1;
  for (size_t i = 0; i < inputs.size(); ++i) matches_type(inputs[i], g_.type(g_.inputs[i]), s0);
  std::vector<Tensor> env(g_.values.size());
  for (const Node& n : g_.nodes) {
    if (n.kind == NodeKind::Input) env[static_cast<size_t>(n.outputs[0])] = inputs[static_cast<size_t>(n.input_index)];
    else if (n.kind == NodeKind::Constant) env[static_cast<size_t>(n.outputs[0])] = n.constant;
  }
  auto tensor = [&](ValueId v) -> const Tensor& {
    const Tensor& t = env[static_cast<size_t>(v)];
    KILN_ASSERT(t.defined(), "CppExecutable(graph ", g_.name, "): %", v, " is read before it is computed");
    return t;
  };
  // An extern step's inputs; a value read for the last time here is handed
  // over rather than copied, so that an op that can reuse a dying input's
  // storage sees nothing else holding it (conv2d's residual: ops/conv.cpp).
  auto run_op = [&](const Node& n, const std::vector<ValueId>& dying = {}) {
    Tensors args;
    for (ValueId v : n.inputs) {
      if (v == kNoValue) {
        args.emplace_back();
      } else if (std::count(dying.begin(), dying.end(), v) == 1 && std::count(n.inputs.begin(), n.inputs.end(), v) == 1) {
        (void)tensor(v);
        args.push_back(std::move(env[static_cast<size_t>(v)]));
      } else {
        args.push_back(tensor(v));
      }
    }
    Tensors out = run_node(g_, n, std::move(args), scalar);
    for (size_t k = 0; k < out.size(); ++k) env[static_cast<size_t>(n.outputs[k])] = std::move(out[k]);
  };
  // A kernel call's arguments: the buffer pointers, the tensors they point
  // into kept alive through the call, the copy-backs to finish after it, and
  // with `ranges` the memory it writes and reads (a region's overlap check).
  auto prepare = [&](size_t k, KernelCall& call, bool ranges) {
    call.pointers.reserve(arguments_[k].size());
    for (const Argument& a : arguments_[k]) {
      const Tensor* memory = nullptr;
      if (a.stored && a.into != kNoValue && tensor(a.into).is_contiguous()) {
        // The copy-back made in place: the kernel stores into the destination.
        const Tensor& dst = tensor(a.into);
        env[static_cast<size_t>(a.value)] = dst;
        call.copy_backs.emplace_back(dst, Tensor());
        memory = &dst;
      } else if (a.stored) {
        Shape shape = a.shape;
        for (size_t d : a.symbolic_dims) shape[d] = s0;
        Tensor out = Tensor::empty(shape, a.dtype, a.device);
        if (a.wrapped_number) out.impl()->wrapped_number = true;
        // A destination not contiguous at run time (a channels-last
        // parameter): the copy-back runs right after the kernel.
        if (a.into != kNoValue) call.copy_backs.emplace_back(tensor(a.into), out);
        env[static_cast<size_t>(a.value)] = std::move(out);
        memory = &env[static_cast<size_t>(a.value)];
      } else {
        const Tensor& in = tensor(a.value);
        if (in.is_contiguous()) {
          memory = &in;
        } else {
          call.held.push_back(in.contiguous());
          memory = &call.held.back();
        }
      }
      auto* begin = static_cast<char*>(memory->data_ptr());
      call.pointers.push_back(begin);
      if (ranges) (a.stored ? call.written : call.read).emplace_back(begin, begin + memory->nbytes());
    }
  };
  auto finish = [](KernelCall& call) {
    for (auto& [dst, value] : call.copy_backs) {
      if (value.defined()) dst.copy_(value);
      else dst.bump_version();  // as the copy_ would have
    }
  };
  const int64_t sizes[1] = {s0};
  for (size_t s = 0; s < program_.steps.size(); ++s) {
    const Step& st = program_.steps[s];
    switch (st.kind) {
      case Step::Kind::Extern: run_op(g_.nodes[static_cast<size_t>(st.node)], free_after_[s]); break;
      case Step::Kind::View: {
        const Node& n = g_.nodes[static_cast<size_t>(st.node)];
        if (program_.needs_tensor[static_cast<size_t>(n.outputs[0])]) run_op(n);
        break;
      }
      case Step::Kind::Kernel: {
        const int region = region_of_kernel_[static_cast<size_t>(st.kernel)];
        if (region == kRegionMember) break;  // ran with its region
        std::vector<int> kernels = region == kNoRegion ? std::vector<int>{st.kernel}
                                                       : program_.regions[static_cast<size_t>(region)];
        std::vector<KernelCall> calls(kernels.size());
        const bool in_region = region != kNoRegion;
        for (size_t j = 0; j < kernels.size(); ++j) prepare(static_cast<size_t>(kernels[j]), calls[j], in_region);
        if (in_region && !overlapping(calls)) {
          std::vector<void* const*> pointers;
          for (const KernelCall& c : calls) pointers.push_back(c.pointers.data());
          {
            ProfileRange timed(region_names_[static_cast<size_t>(region)].c_str());  // a profile names each call
            region_functions_[static_cast<size_t>(region)](pointers.data(), sizes);
          }
          for (KernelCall& c : calls) finish(c);
          break;
        }
        // One kernel, or a region whose memory overlaps at run time (an
        // extern's output aliasing a buffer): the kernels one by one, each
        // prepared after the ones before it ran (a contiguous copy of an
        // input they wrote must see their writes).
        for (size_t j = 0; j < kernels.size(); ++j) {
          if (j > 0) {
            calls[j] = KernelCall();
            prepare(static_cast<size_t>(kernels[j]), calls[j], false);
          }
          {
            ProfileRange timed(kernel_names_[static_cast<size_t>(kernels[j])].c_str());
            functions_[static_cast<size_t>(kernels[j])](calls[j].pointers.data(), sizes);
          }
          finish(calls[j]);
        }
        break;
      }
    }
    for (ValueId v : free_after_[s]) env[static_cast<size_t>(v)] = Tensor();
  }
  Tensors result;
  for (ValueId v : g_.outputs) result.push_back(env[static_cast<size_t>(v)]);
  return result;
}

std::unique_ptr<GraphExecutable> make_executable(const Graph& g, const std::string& backend) {
  if (backend == "interpreter") return std::make_unique<Interpreter>(g);
  if (backend == "cpp") {
    // Generated C++ runs on the host: a graph with device tensors (a model
    // on CUDA compiled with backend "cpp") runs on the interpreter, whose
    // eager kernels dispatch by device, until the CUDA generator comes.
    for (const Value& v : g.values)
      if (const Device& d = v.type.device; !d.is_cpu()) {
        std::string why = "backend \"cpp\" generates CPU code; graphs with ";
        why += d.str();
        why += " tensors run on the interpreter (the eager kernels)";
        log_once(LogCategory::Graphs, "cpp-backend-device", why);
        return std::make_unique<Interpreter>(g);
      }
    return std::make_unique<CppExecutable>(g);
  }
  KILN_FAIL("compile: backend \"", backend, "\" is not available; use \"interpreter\" or \"cpp\"");
}

}  // namespace kiln::compiler
