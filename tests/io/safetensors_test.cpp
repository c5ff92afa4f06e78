#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "amber/io/safetensors.h"
#include "ops/testing.h"

namespace amber {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("amber_" + name)).string();
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

}  // namespace
}  // namespace amber
