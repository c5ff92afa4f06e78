#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "amber/io/gguf.h"

namespace amber {
namespace {

// A little-endian reader over a whole file, for checking the layout byte by byte.
struct Bytes {
  std::string data;
  size_t at = 0;
  template <class T>
  T read() {
    T v;
    std::memcpy(&v, data.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string string() {
    const auto n = read<uint64_t>();
    std::string s = data.substr(at, n);
    at += n;
    return s;
  }
};

TEST(Gguf, HeaderMetadataTensorInfosAndAlignedDataAreWhereTheFormatPutsThem) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("amber_" + std::to_string(::getpid()) + "_test.gguf")).string();
  const Tensor matrix = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor vector = Tensor::from_vector<float>({7}, {1});
  save_gguf(path,
            {{"general.architecture", std::string("llama")},
             {"llama.block_count", uint32_t{2}},
             {"llama.rope.freq_base", 10000.0f},
             {"tokenizer.ggml.add_bos_token", true},
             {"tokenizer.ggml.tokens", std::vector<std::string>{"a", "bc"}},
             {"tokenizer.ggml.token_type", std::vector<int32_t>{1, 3}}},
            {{"w", matrix}, {"v", vector.to(DType::bf16)}});
  std::ifstream in(path, std::ios::binary);
  Bytes b{std::string(std::istreambuf_iterator<char>(in), {})};
  std::filesystem::remove(path);
  EXPECT_EQ(b.data.substr(0, 4), "GGUF");
  b.at = 4;
  EXPECT_EQ(b.read<uint32_t>(), 3u);
  EXPECT_EQ(b.read<uint64_t>(), 2u);  // tensors
  EXPECT_EQ(b.read<uint64_t>(), 6u);  // metadata entries
  EXPECT_EQ(b.string(), "general.architecture");
  EXPECT_EQ(b.read<uint32_t>(), 8u);  // string
  EXPECT_EQ(b.string(), "llama");
  EXPECT_EQ(b.string(), "llama.block_count");
  EXPECT_EQ(b.read<uint32_t>(), 4u);  // uint32
  EXPECT_EQ(b.read<uint32_t>(), 2u);
  EXPECT_EQ(b.string(), "llama.rope.freq_base");
  EXPECT_EQ(b.read<uint32_t>(), 6u);  // float32
  EXPECT_EQ(b.read<float>(), 10000.0f);
  EXPECT_EQ(b.string(), "tokenizer.ggml.add_bos_token");
  EXPECT_EQ(b.read<uint32_t>(), 7u);  // bool
  EXPECT_EQ(b.read<uint8_t>(), 1u);
  EXPECT_EQ(b.string(), "tokenizer.ggml.tokens");
  EXPECT_EQ(b.read<uint32_t>(), 9u);  // array
  EXPECT_EQ(b.read<uint32_t>(), 8u);  // of strings
  EXPECT_EQ(b.read<uint64_t>(), 2u);
  EXPECT_EQ(b.string(), "a");
  EXPECT_EQ(b.string(), "bc");
  EXPECT_EQ(b.string(), "tokenizer.ggml.token_type");
  EXPECT_EQ(b.read<uint32_t>(), 9u);
  EXPECT_EQ(b.read<uint32_t>(), 5u);  // of int32
  EXPECT_EQ(b.read<uint64_t>(), 2u);
  EXPECT_EQ(b.read<int32_t>(), 1);
  EXPECT_EQ(b.read<int32_t>(), 3);
  // Tensor infos: dims innermost first, the ggml type, offsets aligned to 32.
  EXPECT_EQ(b.string(), "w");
  EXPECT_EQ(b.read<uint32_t>(), 2u);
  EXPECT_EQ(b.read<uint64_t>(), 3u);
  EXPECT_EQ(b.read<uint64_t>(), 2u);
  EXPECT_EQ(b.read<uint32_t>(), 0u);  // F32
  EXPECT_EQ(b.read<uint64_t>(), 0u);
  EXPECT_EQ(b.string(), "v");
  EXPECT_EQ(b.read<uint32_t>(), 1u);
  EXPECT_EQ(b.read<uint64_t>(), 1u);
  EXPECT_EQ(b.read<uint32_t>(), 30u);  // BF16
  EXPECT_EQ(b.read<uint64_t>(), 32u);  // 24 bytes of w, padded
  const size_t data = (b.at + 31) / 32 * 32;
  EXPECT_EQ(b.data.size(), data + 32 + 32);
  b.at = data;
  for (float want : {1, 2, 3, 4, 5, 6}) EXPECT_EQ(b.read<float>(), want);
  b.at = data + 32;
  EXPECT_EQ(b.read<uint16_t>(), 0x40e0u);  // 7 in bf16
}

}  // namespace
}  // namespace amber
