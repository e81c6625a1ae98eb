#include "compiler/codegen/cpp/loaded_module.h"

#include <dlfcn.h>

#include "compiler/codegen/cpp/elf_check.h"
#include "kiln/error.h"

namespace kiln::compiler::codegen {

std::shared_ptr<LoadedModule> LoadedModule::try_open(const std::filesystem::path& so, std::string key, JitIsa isa,
                                                     std::string& error) {
  // RTLD_NOW: an unresolved symbol (say, a Sleef function the library lacks)
  // fails here, where the JIT can report or rebuild, not at the first call.
  // RTLD_LOCAL: kernels of different modules may share names.
  if (!elf_file_is_complete(so, error)) return nullptr;  // dlopen would SIGBUS on a truncated file
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    error = e ? e : "dlopen failed";
    return nullptr;
  }
  return std::shared_ptr<LoadedModule>(new LoadedModule(handle, so, std::move(key), isa));
}

LoadedModule::~LoadedModule() { dlclose(handle_); }

bool LoadedModule::has_symbol(const std::string& name) const { return dlsym(handle_, name.c_str()) != nullptr; }

void* LoadedModule::raw_symbol(const std::string& name) const {
  void* p = dlsym(handle_, name.c_str());
  KILN_CHECK(p, "the compiled kernel module ", path_.string(), " has no function '", name,
             "'; the generated source must define it with extern \"C\" linkage (not static, not a C++ name)");
  return p;
}

}  // namespace kiln::compiler::codegen
