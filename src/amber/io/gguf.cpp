#include "amber/io/gguf.h"

#include <filesystem>
#include <fstream>

#include "amber/core/error.h"

namespace amber {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = 32;  // GGUF's default general.alignment

// GGUF's value type codes.
enum : uint32_t { kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7, kString = 8, kArray = 9 };

uint32_t ggml_type(DType dtype, const std::string& path, const std::string& name) {
  switch (dtype) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::bf16: return 30;
    default: fail(path, ": tensor '", name, "' is ", dtype_name(dtype), "; GGUF export writes f32, f16 or bf16");
  }
}

uint64_t padding(uint64_t offset) { return (kAlignment - offset % kAlignment) % kAlignment; }

class Writer {
 public:
  explicit Writer(std::ofstream& out) : out_(out) {}
  template <class T>
  void raw(T v) {
    out_.write(reinterpret_cast<const char*>(&v), sizeof v);  // GGUF is little-endian, as x86 and ARM are
    written_ += sizeof v;
  }
  void string(const std::string& s) {
    raw<uint64_t>(s.size());
    out_.write(s.data(), static_cast<std::streamsize>(s.size()));
    written_ += s.size();
  }
  void zeros(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) raw<uint8_t>(0);
  }
  void value(const GgufValue& v) {
    if (const auto* u = std::get_if<uint32_t>(&v)) {
      raw(kUint32);
      raw(*u);
    } else if (const auto* f = std::get_if<float>(&v)) {
      raw(kFloat32);
      raw(*f);
    } else if (const auto* b = std::get_if<bool>(&v)) {
      raw(kBool);
      raw<uint8_t>(*b ? 1 : 0);
    } else if (const auto* s = std::get_if<std::string>(&v)) {
      raw(kString);
      string(*s);
    } else if (const auto* strings = std::get_if<std::vector<std::string>>(&v)) {
      raw(kArray);
      raw(kString);
      raw<uint64_t>(strings->size());
      for (const std::string& x : *strings) string(x);
    } else {
      const auto& ints = std::get<std::vector<int32_t>>(v);
      raw(kArray);
      raw(kInt32);
      raw<uint64_t>(ints.size());
      for (int32_t x : ints) raw(x);
    }
  }
  uint64_t written() const { return written_; }

 private:
  std::ofstream& out_;
  uint64_t written_ = 0;
};

}  // namespace

void save_gguf(const std::string& path, const std::vector<GgufEntry>& metadata,
               const std::vector<NamedTensor>& tensors) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    AMBER_CHECK(out, "cannot write ", temporary, ": check the directory exists and is writable");
    Writer w(out);
    w.raw<uint32_t>(0x46554747);  // "GGUF"
    w.raw(kVersion);
    w.raw<uint64_t>(tensors.size());
    w.raw<uint64_t>(metadata.size());
    for (const GgufEntry& e : metadata) {
      w.string(e.key);
      w.value(e.value);
    }
    uint64_t offset = 0;
    for (const NamedTensor& t : tensors) {
      w.string(t.name);
      w.raw<uint32_t>(static_cast<uint32_t>(t.tensor.ndim()));
      for (int d = t.tensor.ndim() - 1; d >= 0; --d) w.raw<uint64_t>(static_cast<uint64_t>(t.tensor.size(d)));
      w.raw(ggml_type(t.tensor.dtype(), path, t.name));
      w.raw(offset);
      offset += t.tensor.bytes() + padding(t.tensor.bytes());
    }
    w.zeros(padding(w.written()));
    for (const NamedTensor& t : tensors) {
      const Tensor host = t.tensor.to(Device::cpu()).contiguous();
      out.write(static_cast<const char*>(host.raw()), static_cast<std::streamsize>(host.bytes()));
      w.zeros(padding(host.bytes()));
    }
    out.flush();
    AMBER_CHECK(out, "writing ", temporary, " failed (disk full?)");
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace amber
