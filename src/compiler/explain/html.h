// kiln::explain's report as one self-contained HTML page (`kiln explain
// --html FILE`): a summary table, the graph breaks, guards, op counts, and
// each graph drawn as inline SVG (Graphviz) above its printed IR.
#pragma once
#include <string>

#include "kiln/explain.h"

namespace kiln::compiler {

// `title` heads the page ("airbench, train step").
std::string explain_html(const ExplainReport& report, const std::string& title);
// The page written atomically to `path`; kiln::Error when it cannot be.
void write_explain_html(const ExplainReport& report, const std::string& title, const std::string& path);

}  // namespace kiln::compiler
