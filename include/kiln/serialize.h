// Checkpoints in the safetensors format (an 8-byte little-endian header
// length, a JSON header of {name: {dtype, shape, data_offsets}} plus
// "__metadata__" strings, then raw little-endian data), so tensors saved by
// kiln open in PyTorch with safetensors.torch.load_file.
#pragma once
#include <map>
#include <string>

#include "kiln/nn.h"

namespace kiln {

// Writes atomically: a temporary file in the same directory, fsync, rename.
void save_safetensors(const std::string& path, const nn::TensorDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Reads every tensor (CPU); kiln::Error naming the file on a bad header,
// unknown dtype, out-of-range offsets or a truncated file.
nn::TensorDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace kiln
