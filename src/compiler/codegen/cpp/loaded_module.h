// A compiled kernel library loaded into kiln (dlopen), and its functions.
//
// Modules stay loaded while anyone holds the shared_ptr; the JIT keeps one
// per cache key for the life of its CppJit, so function pointers taken from a
// module stay valid while a compiled graph may call them.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>

#include "compiler/codegen/cpp/host_isa.h"

namespace kiln::compiler::codegen {

// dlsym's void* as the function pointer type the caller names.
template <typename FnPtr>
FnPtr function_pointer_cast(void* address) {
  static_assert(std::is_pointer_v<FnPtr> && std::is_function_v<std::remove_pointer_t<FnPtr>>,
                "symbol<F>: F must be a function pointer type");
  return reinterpret_cast<FnPtr>(address);
}

class LoadedModule {
 public:
  // dlopen(RTLD_NOW | RTLD_LOCAL) of `so`; nullptr with `error` set when it
  // is not a whole, loadable library (elf_check.h), e.g. a truncated cache entry.
  static std::shared_ptr<LoadedModule> try_open(const std::filesystem::path& so, std::string key, JitIsa isa,
                                                std::string& error);
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  // The address of the extern "C" function `name`; a missing one is a
  // kiln::Error naming it and the module.
  void* raw_symbol(const std::string& name) const;
  // symbol<void (*)(const float*, float*, int64_t)>("kernel_0")
  template <typename FnPtr>
  FnPtr symbol(const std::string& name) const {
    return function_pointer_cast<FnPtr>(raw_symbol(name));
  }
  bool has_symbol(const std::string& name) const;

  const std::filesystem::path& path() const { return path_; }  // the cache entry (<key>.so)
  const std::string& key() const { return key_; }
  const JitIsa& isa() const { return isa_; }

 private:
  LoadedModule(void* handle, std::filesystem::path path, std::string key, JitIsa isa)
      : handle_(handle), path_(std::move(path)), key_(std::move(key)), isa_(isa) {}
  void* handle_;
  std::filesystem::path path_;
  std::string key_;
  JitIsa isa_;
};

}  // namespace kiln::compiler::codegen
