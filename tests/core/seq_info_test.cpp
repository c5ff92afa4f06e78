#include <gtest/gtest.h>

#include "amber/core/seq_info.h"

namespace amber {
namespace {

TEST(SeqInfo, LengthsGiveBoundariesAndPositions) {
  const SeqInfo s = SeqInfo::from_lengths({3, 1, 2});
  EXPECT_EQ(s.cu_seqlens_host, (std::vector<int32_t>{0, 3, 4, 6}));
  EXPECT_EQ(s.positions.to_doubles(), (std::vector<double>{0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(s.max_seqlen, 3);
  EXPECT_EQ(s.lengths(), (std::vector<int32_t>{3, 1, 2}));
}

TEST(SeqInfo, EmptyDocumentIsRefusedByIndex) {
  try {
    SeqInfo::from_lengths({4, 0, 2});
    FAIL() << "a zero-length document was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("document 1 has length 0"), std::string::npos) << e.what();
  }
}

// Plans derived from a layout live with that object only: the trainer refills one
// layout's buffers in place each step and hands the model a copy, which must plan anew.
TEST(SeqInfo, DerivedTensorsAreKeptPerObjectAndNotCopied) {
  SeqInfo s = SeqInfo::from_lengths({5, 7});
  EXPECT_EQ(s.derived.find("plan"), nullptr);
  const Tensor& kept = s.derived.keep("plan", Tensor::full({2}, 1.0, DType::f32));
  ASSERT_NE(s.derived.find("plan"), nullptr);
  EXPECT_TRUE(s.derived.find("plan")->shares_storage_with(kept));
  EXPECT_EQ(s.derived.find("other"), nullptr);

  const SeqInfo copy = s;
  EXPECT_EQ(copy.derived.find("plan"), nullptr);
  const SeqInfo moved = s.to(Device::cpu());
  EXPECT_EQ(moved.derived.find("plan"), nullptr);
  SeqInfo assigned = SeqInfo::from_lengths({1});
  assigned.derived.keep("plan", Tensor::full({1}, 2.0, DType::f32));
  assigned = s;
  EXPECT_EQ(assigned.derived.find("plan"), nullptr);
  ASSERT_NE(s.derived.find("plan"), nullptr);  // the original keeps its own
}

}  // namespace
}  // namespace amber
