#include "amber/io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "amber/core/error.h"

namespace amber {
namespace {

const std::map<DType, std::string>& dtype_names() {
  static const std::map<DType, std::string> names = {
      {DType::f64, "F64"},     {DType::f32, "F32"},        {DType::bf16, "BF16"},
      {DType::f16, "F16"},     {DType::f8e4m3, "F8_E4M3"}, {DType::f8e5m2, "F8_E5M2"},
      {DType::e8m0, "F8_E8M0"}, {DType::i32, "I32"},        {DType::i64, "I64"},
      {DType::u16, "U16"}};
  return names;
}

DType dtype_from_safetensors(const std::string& name, const std::string& path, const std::string& tensor) {
  for (const auto& [dtype, n] : dtype_names())
    if (n == name) return dtype;
  fail(path, ": tensor '", tensor, "' has dtype ", name, ", which amber does not read");
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const NamedTensor& t : tensors) {
    AMBER_CHECK(!header.contains(t.name), path, ": tensor name '", t.name, "' appears twice");
    std::vector<int64_t> shape;
    for (int i = 0; i < t.tensor.ndim(); ++i) shape.push_back(t.tensor.size(i));
    header[t.name] = {{"dtype", dtype_names().at(t.tensor.dtype())},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + t.tensor.bytes()}}};
    offset += t.tensor.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    AMBER_CHECK(out, "cannot write ", temporary, ": check the directory exists and is writable");
    const uint64_t length = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(length >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const NamedTensor& t : tensors) {
      const Tensor host = t.tensor.to(Device::cpu()).contiguous();
      out.write(static_cast<const char*>(host.raw()), static_cast<std::streamsize>(host.bytes()));
    }
    out.flush();
    AMBER_CHECK(out, "writing ", temporary, " failed (disk full?)");
  }
  std::filesystem::rename(temporary, path);
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  AMBER_CHECK(in, "cannot open ", path, ": the file does not exist or is not readable");
  const uint64_t file_size = std::filesystem::file_size(path);
  AMBER_CHECK(file_size >= 8, path, ": truncated safetensors file (", file_size, " bytes, no header)");
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(le[i]) << (8 * i);
  AMBER_CHECK(header_size <= file_size - 8, path, ": header length ", header_size,
              " runs past the end of the file (", file_size, " bytes); the file is truncated or not safetensors");
  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": the safetensors header is not valid JSON (", e.what(), ")");
  }
  AMBER_CHECK(header.is_object(), path, ": the safetensors header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_size;
  SafetensorsFile result;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : entry.items()) result.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    AMBER_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                    entry.contains("data_offsets"),
                path, ": tensor '", name, "' lacks dtype, shape or data_offsets");
    const DType dtype = dtype_from_safetensors(entry["dtype"].get<std::string>(), path, name);
    Shape shape;
    for (const auto& d : entry["shape"]) shape.push_back(d.get<int64_t>());
    const uint64_t begin = entry["data_offsets"][0].get<uint64_t>(), end = entry["data_offsets"][1].get<uint64_t>();
    AMBER_CHECK(begin <= end && end <= data_size, path, ": tensor '", name, "' claims bytes [", begin, ", ", end,
                ") but the data section has ", data_size, " bytes; the file is truncated");
    AMBER_CHECK(end - begin == static_cast<uint64_t>(shape.numel()) * dtype_size(dtype), path, ": tensor '",
                name, "' of shape ", shape, " needs ", shape.numel() * static_cast<int64_t>(dtype_size(dtype)),
                " bytes, its range holds ", end - begin);
    ranges.emplace_back(begin, end);
    Tensor t = Tensor::empty(shape, dtype);
    in.seekg(static_cast<std::streamoff>(8 + header_size + begin));
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(end - begin));
    AMBER_CHECK(in, path, ": reading tensor '", name, "' failed");
    result.tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    AMBER_CHECK(ranges[i].first >= ranges[i - 1].second, path, ": two tensors share bytes; the file is corrupt");
  return result;
}

}  // namespace amber
