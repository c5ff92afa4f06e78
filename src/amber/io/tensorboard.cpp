#include "amber/io/tensorboard.h"

#include <array>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "amber/core/error.h"

namespace amber {
namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial.
std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// Protobuf's wire format, the parts an Event needs: varints, 32- and 64-bit fixed
// fields (little-endian, as this machine stores them) and length-delimited ones.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire_type) { varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }
void fixed64(std::string& out, int field, double v) {
  key(out, field, 1);
  char bytes[8];
  std::memcpy(bytes, &v, 8);
  out.append(bytes, 8);
}
void fixed32(std::string& out, int field, float v) {
  key(out, field, 5);
  char bytes[4];
  std::memcpy(bytes, &v, 4);
  out.append(bytes, 4);
}
void int64_field(std::string& out, int field, int64_t v) {
  key(out, field, 0);
  varint(out, static_cast<uint64_t>(v));
}
void bytes_field(std::string& out, int field, const std::string& v) {
  key(out, field, 2);
  varint(out, v.size());
  out += v;
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary =
// 5. Summary: value = 1. Summary.Value: tag = 1, simple_value = 2 (float), tensor = 8,
// metadata = 9. SummaryMetadata: plugin_data = 1; PluginData: plugin_name = 1.
// TensorProto: dtype = 1 (DT_STRING = 7), tensor_shape = 2, string_val = 8.
std::string event(double wall_time, int64_t step, const std::string& summary_value) {
  std::string summary, e;
  bytes_field(summary, 1, summary_value);
  fixed64(e, 1, wall_time);
  int64_field(e, 2, step);
  bytes_field(e, 5, summary);
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  AMBER_CHECK(!error, "cannot create the TensorBoard folder ", dir, " (", error.message(),
              "); check the run folder's permissions, or set train.tensorboard = false");
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(std::time(nullptr)) + ".amber"))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  AMBER_CHECK(out_, "cannot write the TensorBoard event file ", path_,
              "; check the folder's permissions and free space, or set train.tensorboard = false");
  std::string e;
  fixed64(e, 1, static_cast<double>(std::time(nullptr)));
  bytes_field(e, 3, "brain.Event:2");
  write_event(e);
  flush();
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  std::string v;
  bytes_field(v, 1, tag);
  fixed32(v, 2, static_cast<float>(value));
  write_event(event(wall_time, step, v));
}

void TensorBoardWriter::text(const std::string& tag, int64_t step, const std::string& text, double wall_time) {
  std::string plugin, metadata, tensor, v;
  bytes_field(plugin, 1, "text");
  bytes_field(metadata, 1, plugin);
  int64_field(tensor, 1, 7);
  bytes_field(tensor, 2, "");
  bytes_field(tensor, 8, text);
  bytes_field(v, 1, tag);
  bytes_field(v, 8, tensor);
  bytes_field(v, 9, metadata);
  write_event(event(wall_time, step, v));
}

void TensorBoardWriter::flush() { out_.flush(); }

void TensorBoardWriter::write_event(const std::string& e) {
  const uint64_t length = e.size();
  char header[12];
  std::memcpy(header, &length, 8);
  const uint32_t length_crc = masked_crc32c(header, 8), data_crc = masked_crc32c(e.data(), e.size());
  std::memcpy(header + 8, &length_crc, 4);
  out_.write(header, 12);
  out_.write(e.data(), static_cast<std::streamsize>(e.size()));
  out_.write(reinterpret_cast<const char*>(&data_crc), 4);
}

}  // namespace amber
