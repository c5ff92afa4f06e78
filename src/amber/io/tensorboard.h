// TensorBoard event files, written without TensorBoard or protobuf: a TFRecord stream
// (each record its length and data, each guarded by a masked CRC-32C) of Event messages
// encoded by hand, holding scalar summaries and text summaries (the text plugin's
// string tensors). TensorBoard, and W&B's TensorBoard sync, read them as they grow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace amber {

// CRC-32C (Castagnoli) of `size` bytes, and the masked form TFRecord stores.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates dir (if needed) and events.out.tfevents.<seconds>.amber in it, starting with
  // the file-version event; an error names the path when it cannot be written.
  explicit TensorBoardWriter(const std::string& dir);

  // wall_time: seconds since the Unix epoch.
  void scalar(const std::string& tag, int64_t step, double value, double wall_time);
  void text(const std::string& tag, int64_t step, const std::string& text, double wall_time);
  // Hands what was written to the file system (TensorBoard reads files as they grow).
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace amber
