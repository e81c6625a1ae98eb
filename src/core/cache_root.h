// Where kiln keeps what it learns about this machine between runs: compiled
// kernels (compiler/codegen/cpp/kernel_cache.h) and autotuning choices
// (ops/conv_autotune.h), each in its own versioned subdirectory.
#pragma once
#include <filesystem>

namespace kiln {

// KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln (read on
// every call). Neither set is a kiln::Error saying which to set.
std::filesystem::path cache_root();

}  // namespace kiln
