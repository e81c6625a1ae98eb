// The graph IR as a picture: Graphviz DOT text and SVG (explain's HTML
// report draws each graph this way).
//
// One DOT node per graph node, labelled with its op (or input/constant) and
// output types; inputs, constants, scalar inputs and the outputs have their
// own shape and colour, so a reader finds the edges of the graph at a glance.
#pragma once
#include <string>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

std::string to_dot(const Graph& g);
// Lays the graph out with Graphviz (libgvc, "dot" layout) and writes an SVG
// file atomically (a temporary file renamed over `path`). kiln::Error when
// the file cannot be written.
void write_svg(const Graph& g, const std::string& path);
// The SVG text itself.
std::string render_svg(const Graph& g);
// SVG from DOT text (as to_dot writes it); `name` is for error messages.
std::string dot_to_svg(const std::string& dot, const std::string& name);
// Writes `contents` to `path` atomically (a temporary file beside it renamed
// over it), so readers never see half a file; kiln::Error naming `who` and
// the path when it cannot. write_svg and explain's HTML report use it.
void write_file_atomically(const std::string& path, const std::string& contents, const std::string& who);

}  // namespace kiln::compiler
