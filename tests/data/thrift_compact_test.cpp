// Thrift compact protocol decoding, as Parquet's footer and page headers use it: every
// field kind decoded or skipped, every truncation an error, crafted counts and nesting
// refused without looping.
#include <gtest/gtest.h>

#include "amber/data/thrift_compact.h"
#include "data/testing.h"
#include "data/thrift_writer.h"

namespace amber::data {
namespace {

using testing::bytes_of;
using testing::CompactWriter;

// A struct with every kind of field: ints of each width (negative ones too), a long-form
// field id, booleans, a string, a long list, and a nested struct, map and double to skip.
std::string sample_struct() {
  CompactWriter w;
  w.field(1, ThriftType::i32);
  w.zigzag(-7);
  w.field(2, ThriftType::i64);
  w.zigzag(int64_t{1} << 40);
  w.field(3, ThriftType::bool_true);
  w.field(4, ThriftType::bool_false);
  w.field(5, ThriftType::binary);
  w.binary("café");
  w.field(6, ThriftType::list);
  w.list(ThriftType::i32, 20);
  for (int i = 0; i < 20; ++i) w.zigzag(i * 1000);
  w.field(7, ThriftType::structure);  // skipped: a nested struct with a string and a list of structs
  w.begin();
  w.field(1, ThriftType::binary);
  w.binary("skip me");
  w.field(2, ThriftType::list);
  w.list(ThriftType::structure, 2);
  for (int i = 0; i < 2; ++i) {
    w.begin();
    w.field(1, ThriftType::bool_true);
    w.end();
  }
  w.end();
  w.field(8, ThriftType::map);  // skipped: {1: "a", 2: "b"}
  w.varint(2);
  w.out += static_cast<char>(static_cast<int>(ThriftType::i32) << 4 | static_cast<int>(ThriftType::binary));
  for (int i = 1; i <= 2; ++i) {
    w.zigzag(i);
    w.binary(std::string(1, static_cast<char>('a' + i - 1)));
  }
  w.field(9, ThriftType::f64);  // skipped
  w.out += std::string(8, '\x11');
  w.field(300, ThriftType::i16);  // a long-form id
  w.zigzag(-300);
  w.end();
  return w.out;
}

TEST(ThriftCompact, DecodesEveryFieldKindAndSkipsTheRest) {
  const std::string bytes = sample_struct();
  ThriftReader r(bytes_of(bytes), "test struct");
  r.struct_begin();
  int16_t id;
  ThriftType t;
  std::vector<int16_t> ids;
  std::vector<int64_t> list;
  while (r.next_field(id, t)) {
    ids.push_back(id);
    switch (id) {
      case 1: EXPECT_EQ(r.read_int(t), -7); break;
      case 2: EXPECT_EQ(r.read_int(t), int64_t{1} << 40); break;
      case 3: EXPECT_TRUE(r.read_bool(t)); break;
      case 4: EXPECT_FALSE(r.read_bool(t)); break;
      case 5: EXPECT_EQ(r.read_binary(t), "café"); break;
      case 6: {
        ThriftType element;
        const uint32_t n = r.read_list(t, element);
        EXPECT_EQ(element, ThriftType::i32);
        for (uint32_t i = 0; i < n; ++i) list.push_back(r.read_int(element));
        break;
      }
      case 300: EXPECT_EQ(r.read_int(t), -300); break;
      default: r.skip(t);
    }
  }
  EXPECT_EQ(ids, (std::vector<int16_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 300}));
  ASSERT_EQ(list.size(), 20u);
  EXPECT_EQ(list[19], 19000);
  EXPECT_EQ(r.position(), bytes.size());
}

TEST(ThriftCompact, EveryTruncationIsAnErrorAndWrongTypesAreRefused) {
  const std::string bytes = sample_struct();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string cut = bytes.substr(0, n);
    ThriftReader r(bytes_of(cut), "cut struct");
    EXPECT_THROW(r.skip(ThriftType::structure), Error) << "cut at " << n;
  }
  ThriftReader r(bytes_of(bytes), "test struct");
  r.struct_begin();
  int16_t id;
  ThriftType t;
  ASSERT_TRUE(r.next_field(id, t));
  testing::expect_error([&] { r.read_binary(t); }, {"test struct", "string was expected"});
}

TEST(ThriftCompact, CraftedCountsAndNestingAreRefusedWithoutLooping) {
  CompactWriter w;  // a list claiming four billion elements in a few bytes
  w.list(ThriftType::i32, 0xffffffffu);
  ThriftReader huge(bytes_of(w.out), "huge list");
  ThriftType element;
  EXPECT_THROW(huge.read_list(ThriftType::list, element), ThriftTruncated);
  std::string deep;  // structs nested 100 deep: field 1 of type struct, again and again
  for (int i = 0; i < 100; ++i) deep += static_cast<char>(0x10 | static_cast<int>(ThriftType::structure));
  ThriftReader nested(bytes_of(deep), "deep struct");
  nested.struct_begin();
  testing::expect_error([&] { nested.skip(ThriftType::structure); }, {"deep struct", "deeper than"});
}

}  // namespace
}  // namespace amber::data
