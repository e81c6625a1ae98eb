// DOT and SVG export of the graph IR (dot.h), rendered with Graphviz's C
// library.
#include "compiler/graph/dot.h"

#include <graphviz/gvc.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <unistd.h>

#include "compiler/graph/printer.h"

namespace kiln::compiler {
namespace {

// A DOT string literal: quotes and backslashes escaped; "\n" stays a line
// break for Graphviz.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

std::string outputs_label(const Graph& g, const Node& n) {
  std::string s;
  for (ValueId v : n.outputs) s += detail::concat("\n%", v, ": ", type_str(g.type(v)));
  return s;
}

std::string node_label(const Graph& g, const Node& n) {
  switch (n.kind) {
    case NodeKind::Input: return detail::concat("input ", n.input_index, outputs_label(g, n));
    case NodeKind::Constant: return detail::concat("constant", outputs_label(g, n));
    case NodeKind::Op: {
      std::string label = op_name(n.op);
      std::string attrs = print_attrs(n);
      if (!attrs.empty() && attrs.size() <= 60) label += "\n" + attrs;
      return label + outputs_label(g, n);
    }
  }
  return "?";
}

const char* node_style(const Node& n) {
  switch (n.kind) {
    case NodeKind::Input: return "shape=invhouse, style=filled, fillcolor=\"#cfe2ff\"";
    case NodeKind::Constant: return "shape=note, style=filled, fillcolor=\"#eeeeee\"";
    case NodeKind::Op:
      switch (op_kind(n.op)) {
        case OpKind::View: return "shape=box, style=\"rounded,dashed\"";
        case OpKind::Extern: return "shape=box, style=filled, fillcolor=\"#ffe8cc\"";
        case OpKind::Inplace: return "shape=box, style=filled, fillcolor=\"#ffd6d6\"";
        case OpKind::Random: return "shape=box, style=filled, fillcolor=\"#f0d9ff\"";
        default: return "shape=box";
      }
  }
  return "shape=box";
}

// Graphviz keeps global state: one render at a time.
std::mutex& graphviz_mutex() {
  static std::mutex m;
  return m;
}

// One Graphviz context for the process, never freed (call with the mutex
// held). Freeing one and making another breaks Graphviz 2.42's pango text
// plugin: it keeps a pointer to a font name the freed context owned and
// reads it on the next layout (ASan: heap-use-after-free in strcmp under
// textspan_size, the second SVG a process renders).
GVC_t* graphviz_context() {
  static GVC_t* gvc = gvContext();
  KILN_ASSERT(gvc != nullptr, "Graphviz: gvContext failed");
  return gvc;
}

}  // namespace

std::string to_dot(const Graph& g) {
  std::ostringstream os;
  os << "digraph " << quoted(g.name) << " {\n";
  os << "  node [fontname=\"monospace\", fontsize=10];\n  edge [fontname=\"monospace\", fontsize=9];\n";
  for (size_t i = 0; i < g.scalar_inputs.size(); ++i) {
    const ScalarInput& s = g.scalar_inputs[i];
    os << "  s" << i << " [label=" << quoted(detail::concat('$', i, ' ', s.name, ": ", attr_type_name(s.example)))
       << ", shape=ellipse, style=filled, fillcolor=\"#fff3bf\"];\n";
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    os << "  n" << i << " [label=" << quoted(node_label(g, n)) << ", " << node_style(n) << "];\n";
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (ValueId v : n.inputs) {
      if (v == kNoValue) continue;
      os << "  n" << g.values[static_cast<size_t>(v)].node << " -> n" << i << " [label=\"%" << v << "\"];\n";
    }
    for (const AttrInput& a : n.attr_inputs)
      os << "  s" << a.scalar_index << " -> n" << i << " [style=dashed, label=" << quoted(std::string(a.attr)) << "];\n";
  }
  os << "  outputs [label=\"return\", shape=house, style=filled, fillcolor=\"#d3f9d8\"];\n";
  for (size_t k = 0; k < g.outputs.size(); ++k)
    os << "  n" << g.values[static_cast<size_t>(g.outputs[k])].node << " -> outputs [label=\"" << k << "\"];\n";
  os << "}\n";
  return os.str();
}

std::string render_svg(const Graph& g) { return dot_to_svg(to_dot(g), g.name); }

std::string dot_to_svg(const std::string& dot, const std::string& name) {
  std::lock_guard<std::mutex> lock(graphviz_mutex());
  GVC_t* gvc = graphviz_context();
  std::unique_ptr<Agraph_t, int (*)(Agraph_t*)> graph(agmemread(dot.c_str()), agclose);
  KILN_ASSERT(graph != nullptr, "Graphviz could not parse the DOT text of graph '", name, "'");
  KILN_CHECK(gvLayout(gvc, graph.get(), "dot") == 0, "write_svg(graph ", name,
             "): Graphviz's dot layout failed; is the graphviz package installed with its plugins (dot -c)?");
  char* data = nullptr;
  unsigned int length = 0;
  int rc = gvRenderData(gvc, graph.get(), "svg", &data, &length);
  gvFreeLayout(gvc, graph.get());
  KILN_CHECK(rc == 0 && data != nullptr, "write_svg(graph ", name,
             "): Graphviz could not render SVG; is the graphviz package installed with its plugins (dot -c)?");
  std::string svg(data, length);
  gvFreeRenderData(data);
  return svg;
}

void write_svg(const Graph& g, const std::string& path) { write_file_atomically(path, render_svg(g), "write_svg"); }

void write_file_atomically(const std::string& path, const std::string& contents, const std::string& who) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(out.good(), who, ": cannot create ", tmp, ": ", std::strerror(errno),
               "; check that the directory exists and is writable");
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out.good()) {
      std::filesystem::remove(tmp);
      KILN_FAIL(who, ": writing ", tmp, " failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    KILN_FAIL(who, ": cannot rename ", tmp, " to ", path, ": ", ec.message());
  }
}

}  // namespace kiln::compiler
