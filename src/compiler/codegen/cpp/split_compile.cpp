#include "compiler/codegen/cpp/split_compile.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln::compiler::codegen {

void* ModuleSet::raw_symbol(const std::string& name) const {
  for (const auto& m : modules_) {
    if (m->has_symbol(name)) return m->raw_symbol(name);
  }
  KILN_FAIL("none of the ", modules_.size(), " compiled kernel modules of this graph has a function '", name,
            "'; the generated source must define it with extern \"C\" linkage",
            modules_.empty() ? "" : " (first module: " + modules_.front()->path().string() + ")");
}

std::vector<std::string> split_translation_units(const std::string& prelude, const std::vector<std::string>& pieces,
                                                 const std::string& epilogue, int units) {
  const size_t n = std::clamp<size_t>(static_cast<size_t>(std::max(units, 1)), 1, std::max<size_t>(pieces.size(), 1));
  size_t total = 0;
  for (const std::string& p : pieces) total += p.size();
  std::vector<std::string> out;
  std::string body;
  size_t done = 0;  // bytes of pieces placed in finished units and `body`
  for (size_t i = 0; i < pieces.size(); ++i) {
    body += pieces[i];
    done += pieces[i].size();
    const size_t pieces_left = pieces.size() - i - 1, units_left = n - out.size() - 1;
    // Close this unit at the piece boundary nearest its share of the bytes,
    // but never leave a later unit without a piece.
    const double target = static_cast<double>(total) * static_cast<double>(out.size() + 1) / static_cast<double>(n);
    const double now = static_cast<double>(done);
    const bool nearest = now >= target || (pieces_left > 0 && target - now <= now + pieces[i + 1].size() - target);
    if (units_left > 0 && (nearest || pieces_left == units_left)) {
      out.push_back(prelude + body + epilogue);
      body.clear();
    }
  }
  if (!body.empty() || out.empty()) out.push_back(prelude + body + epilogue);
  return out;
}

ModuleSet compile_cpp_split(const std::string& prelude, const std::vector<std::string>& pieces,
                            const std::string& epilogue, const CompileOptions& options, CppJit* jit) {
  CppJit& j = jit ? *jit : CppJit::global();
  return ModuleSet(j.compile_many(split_translation_units(prelude, pieces, epilogue, compile_jobs()), options));
}

}  // namespace kiln::compiler::codegen
