// safetensors files: an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range, then the raw row-major data. Written to
// a temporary name and renamed, so a reader never sees a half-written file.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "amber/core/tensor.h"

namespace amber {

struct NamedTensor {
  std::string name;
  Tensor tensor;  // any device; copied to the host for writing
};

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // CPU tensors
  std::map<std::string, std::string> metadata;
};

// Validates the whole file (header bounds, dtypes, shapes against byte ranges,
// ranges inside the data and not overlapping) and names the file in every error.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace amber
