// One graph's kernels compiled as several translation units at once.
//
// A single g++ process uses one core, so a graph rendered as one file
// compiles no faster on 16 cores than on one. Splitting its functions into
// one file per available compile job (each with the same prelude) and
// compiling them with compile_many brings the cold compile of a large graph
// down by the number of cores, at a fixed cost of ~0.05 s per extra file.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/cpp/jit_compiler.h"

namespace kiln::compiler::codegen {

// The modules of one split compile, searched together for a function.
class ModuleSet {
 public:
  explicit ModuleSet(std::vector<std::shared_ptr<LoadedModule>> modules) : modules_(std::move(modules)) {}
  // The extern "C" function `name` from whichever module defines it; none is
  // a kiln::Error naming it.
  void* raw_symbol(const std::string& name) const;
  template <typename FnPtr>
  FnPtr symbol(const std::string& name) const {
    return function_pointer_cast<FnPtr>(raw_symbol(name));
  }
  const std::vector<std::shared_ptr<LoadedModule>>& modules() const { return modules_; }

 private:
  std::vector<std::shared_ptr<LoadedModule>> modules_;
};

// prelude + a contiguous run of pieces + epilogue, for `units` runs of about
// equal length (fewer when there are fewer pieces; at least one). Pieces keep
// their order and each appears once; a piece is what must stay together (a
// kernel function with the comment before it).
std::vector<std::string> split_translation_units(const std::string& prelude, const std::vector<std::string>& pieces,
                                                 const std::string& epilogue, int units);

// split_translation_units into KILN_COMPILE_JOBS units (default: the
// hardware threads), compiled in parallel by `jit` (default: CppJit::global()).
// The split depends on the number of jobs, so a machine with another core
// count builds (and caches) other files.
ModuleSet compile_cpp_split(const std::string& prelude, const std::vector<std::string>& pieces,
                            const std::string& epilogue = "", const CompileOptions& options = {},
                            CppJit* jit = nullptr);

}  // namespace kiln::compiler::codegen
