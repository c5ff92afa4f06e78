// GGUF files (llama.cpp's format, version 3): a header, typed key-value metadata, tensor
// descriptions (name, dims innermost first, type, offset) and the tensor data, each
// tensor aligned to 32 bytes. Written to a temporary name and renamed, so a reader never
// sees a half-written file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "amber/io/safetensors.h"

namespace amber {

// The metadata value types amber writes (GGUF has more).
using GgufValue = std::variant<uint32_t, float, bool, std::string, std::vector<std::string>, std::vector<int32_t>>;

struct GgufEntry {
  std::string key;
  GgufValue value;
};

// Tensors in f32, f16 or bf16; a row-major [rows, columns] tensor is stored as GGUF dims
// [columns, rows].
void save_gguf(const std::string& path, const std::vector<GgufEntry>& metadata, const std::vector<NamedTensor>& tensors);

}  // namespace amber
