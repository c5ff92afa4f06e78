// TensorBoard event files: CRC-32C against its check value, and the TFRecord framing
// read back (each record's length and data under their masked CRCs), with the scalar's
// tag and value where protobuf puts them. train.cli reads a run's events back with
// TensorBoard's own reader.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "amber/io/tensorboard.h"

namespace amber {
namespace {

namespace fs = std::filesystem;

TEST(TensorBoard, Crc32cMatchesItsCheckValue) {
  const char* check = "123456789";
  EXPECT_EQ(crc32c(check, 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorBoard, RecordsAreFramedAndGuarded) {
  const fs::path dir = fs::temp_directory_path() / "amber_tensorboard_test";
  fs::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter writer(dir.string());
    writer.scalar("train/loss", 7, 2.5, 1.0e9);
    writer.text("samples/0", 7, "The quick", 1.0e9);
    writer.flush();
    path = writer.path();
  }
  EXPECT_EQ(fs::path(path).parent_path(), dir);
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> events;
  size_t at = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size()) << "a record's header is cut short";
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, bytes.size()) << "a record's data is cut short";
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(bytes.data() + at + 12, length));
    events.emplace_back(bytes.substr(at + 12, length));
    at += 12 + length + 4;
  }
  ASSERT_EQ(events.size(), 3u) << "the file version, the scalar, the text";
  EXPECT_NE(events[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(events[1].find("train/loss"), std::string::npos);
  const float value = 2.5f;
  EXPECT_NE(events[1].find(std::string("\x15", 1) + std::string(reinterpret_cast<const char*>(&value), 4)),
            std::string::npos)
      << "simple_value (field 2, 32-bit) holds 2.5";
  EXPECT_NE(events[2].find("The quick"), std::string::npos);
  EXPECT_NE(events[2].find("text"), std::string::npos) << "the text plugin's name";
  fs::remove_all(dir);
}

TEST(TensorBoard, UnwritableFolderIsNamed) {
  try {
    TensorBoardWriter writer("/proc/amber_cannot_write_here");
    ADD_FAILURE() << "a folder under /proc was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("amber_cannot_write_here"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amber
