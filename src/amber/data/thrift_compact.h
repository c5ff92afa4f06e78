// A reader of Apache Thrift's compact protocol, the encoding of Parquet's footer and page
// headers. It decodes only what a caller asks for and skips the rest, and checks every
// length against the bytes it was given, so a damaged file is an error, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amber/core/error.h"

namespace amber::data {

// Field and element types as the compact protocol numbers them.
enum class ThriftType : uint8_t {
  stop = 0,
  bool_true = 1,  // a boolean field's value lives in its type
  bool_false = 2,
  i8 = 3,
  i16 = 4,
  i32 = 5,
  i64 = 6,
  f64 = 7,
  binary = 8,
  list = 9,
  set = 10,
  map = 11,
  structure = 12,
};

// Raised when the bytes end before the value does: a reader given a window of a larger
// file can read more and try again; otherwise it is an ordinary error.
class ThriftTruncated : public Error {
 public:
  using Error::Error;
};

class ThriftReader {
 public:
  // `what` names the bytes in error messages ("the footer of data.parquet").
  ThriftReader(std::span<const uint8_t> bytes, std::string what);

  // Struct traversal: struct_begin(), then next_field() until it returns false (the
  // struct's stop byte), reading or skipping each field's value in between.
  void struct_begin();
  bool next_field(int16_t& id, ThriftType& type);

  // A value of the field or element type `type`, which must be one of the kind asked for.
  int64_t read_int(ThriftType type);
  bool read_bool(ThriftType type);
  std::string_view read_binary(ThriftType type);
  // A list or set header: its element type and count; the count is checked against the
  // bytes left (every element takes at least one byte).
  uint32_t read_list(ThriftType type, ThriftType& element);

  // Skips a value of any type, nested ones included (to a bounded depth).
  void skip(ThriftType type);

  size_t position() const { return pos_; }
  const std::string& what() const { return what_; }

 private:
  uint8_t byte();
  uint64_t varint();
  int64_t zigzag() {
    const uint64_t v = varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }
  [[noreturn]] void bad(std::string_view why) const;
  void skip_at(ThriftType type, int depth);

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  std::string what_;
  std::vector<int16_t> last_ids_;  // per open struct, the last field id (ids are delta-coded)
  bool pending_bool_ = false;      // the value of the boolean field next_field just returned
};

}  // namespace amber::data
