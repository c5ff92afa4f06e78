#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "amber/io/safetensors.h"
#include "ops/testing.h"

namespace amber {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("amber_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A safetensors file with the given JSON header text and `data_bytes` zero bytes of data.
std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << std::string(data_bytes, '\0');
  return path;
}

// load_safetensors(path) fails with an amber::Error whose message holds every fragment.
void expect_error(const std::string& path, const std::vector<std::string>& fragments) {
  try {
    load_safetensors(path);
    ADD_FAILURE() << path << " loaded";
  } catch (const Error& e) {
    for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an amber::Error: " << e.what();
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  const std::string path = temp_path("roundtrip.safetensors");
  std::vector<NamedTensor> tensors;
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::f8e4m3})
    tensors.push_back({std::string("w.") + std::string(dtype_name(dt)), testing::random_tensor({3, 5}, dt, 1)});
  tensors.push_back({"ids", Tensor::from_vector<int32_t>({4, -1, 7}, {3})});
  save_safetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});
  const SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.metadata.at("step"), "12");
  for (const NamedTensor& t : tensors) {
    const Tensor& back = f.tensors.at(t.name);
    EXPECT_EQ(back.dtype(), t.tensor.dtype());
    EXPECT_EQ(back.shape(), t.tensor.shape());
    EXPECT_EQ(back.to_doubles(), t.tensor.to_doubles()) << t.name;
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, TruncatedAndCorruptFilesNameTheFile) {
  const std::string path = temp_path("bad.safetensors");
  save_safetensors(path, {{"a", testing::random_tensor({64}, DType::f32, 2)}});
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 10);
  try {
    load_safetensors(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage";
  EXPECT_THROW(load_safetensors(path), Error);
  EXPECT_THROW(load_safetensors(temp_path("missing.safetensors")), Error);
  std::filesystem::remove(path);
}

TEST(Safetensors, MalformedHeaderTypesAreErrorsNamingTheTensor) {
  const auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"w": {"dtype": )" + dtype + R"(, "shape": )" + shape + R"(, "data_offsets": )" + offsets + "}}";
  };
  expect_error(write_raw("t1", entry(R"("F32")", R"(["4"])", "[0, 16]"), 16), {"'w'", "shape"});
  expect_error(write_raw("t2", entry(R"("F32")", "[4]", R"(["0", 16])"), 16), {"'w'", "data_offsets"});
  expect_error(write_raw("t3", entry("32", "[4]", "[0, 16]"), 16), {"'w'", "dtype"});
  expect_error(write_raw("t4", entry(R"("F32")", "[-4]", "[0, 16]"), 16), {"'w'", "non-negative"});
  expect_error(write_raw("t5", entry(R"("F32")", "4", "[0, 16]"), 16), {"'w'", "shape"});
  expect_error(write_raw("t6", entry(R"("F32")", "[4]", "[0]"), 16), {"'w'", "data_offsets"});
  expect_error(write_raw("t7", entry(R"("F32")", "[4]", "[0, 1e3]"), 16), {"'w'", "data_offsets"});
  expect_error(write_raw("t8", entry(R"("F32")", "[4]", "[16, 32]"), 16), {"'w'", "truncated"});
  expect_error(write_raw("t9", R"({"__metadata__": 3})", 0), {"__metadata__"});
  expect_error(write_raw("t10", R"({"w": [1, 2]})", 0), {"'w'"});
  const std::string overlapping = R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                                  R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})";
  expect_error(write_raw("t11", overlapping, 16), {"share bytes"});
}

TEST(Safetensors, ShapesWhoseSizeOverflowsAreRefusedBeforeAllocating) {
  // 2^32 * 2^32 elements wrap to 0 in int64 arithmetic; 2^62 F32 elements need 2^64 bytes.
  expect_error(write_raw("o1", R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0),
               {"'w'", "64-bit size"});
  expect_error(write_raw("o2", R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0),
               {"'w'", "64-bit size"});
  expect_error(write_raw("o3", R"({"w": {"dtype": "U16", "shape": [18446744073709551615], "data_offsets": [0, 0]}})", 0),
               {"'w'", "64-bit size"});
  // Within 64 bits but far past the data: refused by the byte count, not allocated.
  expect_error(write_raw("o4", R"({"w": {"dtype": "F32", "shape": [1000000, 1000000], "data_offsets": [0, 16]}})", 16),
               {"'w'", "need 4000000000000 bytes", "holds 16"});
}

TEST(Safetensors, AHeaderDtypeThatDisagreesWithTheStoredBytesIsRefused) {
  // A writer stored 4 F32 values (16 bytes); the header now says F16, and shrank the
  // range to match, leaving 8 bytes no tensor claims.
  expect_error(write_raw("d1", R"({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}})", 16),
               {"account for 8 bytes", "holds 16"});
  expect_error(write_raw("d2", R"({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 16]}})", 16),
               {"'w'", "F16", "need 8 bytes", "holds 16"});
}

TEST(Safetensors, ADirectoryIsRefusedNamingIt) {
  const std::string dir = temp_path("dir.safetensors");
  std::filesystem::create_directories(dir);
  expect_error(dir, {dir, "is a directory"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace amber
