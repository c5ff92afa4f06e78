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
      {DType::u16, "U16"},     {DType::u8, "U8"}};
  return names;
}

DType dtype_from_safetensors(const std::string& name, const std::string& path, const std::string& tensor) {
  for (const auto& [dtype, n] : dtype_names())
    if (n == name) return dtype;
  fail(path, ": tensor '", tensor, "' has dtype ", name, ", which amber does not read");
}

struct TensorEntry {
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// One header entry, every field checked for type and range before anything is
// allocated, so a damaged header is an error naming the tensor, never a huge allocation.
TensorEntry parse_entry(const nlohmann::json& entry, uint64_t data_size, const std::string& path,
                        const std::string& name) {
  const std::string where = concat(path, ": tensor '", name, "'");
  AMBER_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
              where, " lacks dtype, shape or data_offsets");
  const nlohmann::json &dtype = entry["dtype"], &shape = entry["shape"], &offsets = entry["data_offsets"];
  AMBER_CHECK(dtype.is_string(), where, ": dtype must be a string such as \"F32\", got ", dtype.dump());
  TensorEntry e{dtype_from_safetensors(dtype.get<std::string>(), path, name), {}, 0, 0};
  AMBER_CHECK(shape.is_array() && shape.size() <= static_cast<size_t>(kMaxDims), where,
              ": shape must be an array of at most ", kMaxDims, " non-negative integers, got ", shape.dump());
  uint64_t bytes = dtype_size(e.dtype);
  for (const nlohmann::json& d : shape) {
    AMBER_CHECK(d.is_number_unsigned(), where, ": shape must hold non-negative integers, got ", shape.dump());
    const uint64_t dim = d.get<uint64_t>();
    AMBER_CHECK(dim <= static_cast<uint64_t>(INT64_MAX) && (dim == 0 || bytes <= static_cast<uint64_t>(INT64_MAX) / dim),
                where, ": shape ", shape.dump(), " has more bytes than a 64-bit size can count; the header is corrupt");
    bytes *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  AMBER_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                  offsets[1].is_number_unsigned(),
              where, ": data_offsets must be two non-negative integers [begin, end], got ", offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  AMBER_CHECK(e.begin <= e.end && e.end <= data_size, where, " claims bytes [", e.begin, ", ", e.end,
              ") but the data section has ", data_size, " bytes; the file is truncated");
  AMBER_CHECK(e.end - e.begin == bytes, where, " has dtype ", dtype.get<std::string>(), " and shape ", e.shape,
              ", which need ", bytes, " bytes, but its range holds ", e.end - e.begin,
              "; the header's dtype or shape disagrees with the stored data");
  return e;
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
  AMBER_CHECK(!std::filesystem::is_directory(path), path, " is a directory; give the path of a .safetensors file");
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
      AMBER_CHECK(entry.is_object(), path, ": __metadata__ must be a JSON object of strings");
      for (const auto& [k, v] : entry.items()) result.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    const TensorEntry e = parse_entry(entry, data_size, path, name);
    ranges.emplace_back(e.begin, e.end);
    Tensor t = Tensor::empty(e.shape, e.dtype);
    in.seekg(static_cast<std::streamoff>(8 + header_size + e.begin));
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(e.end - e.begin));
    AMBER_CHECK(in, path, ": reading tensor '", name, "' failed");
    result.tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    AMBER_CHECK(ranges[i].first >= ranges[i - 1].second, path, ": two tensors share bytes; the file is corrupt");
  // As the safetensors format requires, the tensors tile the data section exactly: bytes
  // no tensor claims mean the header and the data disagree (a changed dtype or shape).
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) covered += end - begin;
  AMBER_CHECK(covered == data_size, path, ": the header's tensors account for ", covered, " bytes but the data section holds ",
              data_size, "; the header does not describe this data (a changed dtype or shape?)");
  return result;
}

}  // namespace amber
