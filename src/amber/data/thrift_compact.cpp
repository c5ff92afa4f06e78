// The compact protocol in brief: a field header byte holds the id's delta from the
// previous field (or 0, then a zigzag varint id) and the type; integers are zigzag
// varints; binary is a varint length and bytes; a list header holds the count (15:
// a varint follows) and element type; a boolean field's value is its type, a boolean
// element is one byte.
#include "amber/data/thrift_compact.h"

#include <limits>

namespace amber::data {
namespace {

// Deeper nesting than Parquet's own (four levels) is damage, and unbounded recursion on
// crafted bytes would exhaust the stack.
constexpr int kMaxDepth = 32;

bool is_int(ThriftType t) {
  return t == ThriftType::i8 || t == ThriftType::i16 || t == ThriftType::i32 || t == ThriftType::i64;
}

}  // namespace

ThriftReader::ThriftReader(std::span<const uint8_t> bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

void ThriftReader::bad(std::string_view why) const {
  fail(what_, " is damaged: ", why, " at byte ", pos_, " of its Thrift metadata; the file is corrupt or not ",
       "Parquet (copy or download it again)");
}

uint8_t ThriftReader::byte() {
  if (pos_ >= bytes_.size()) {
    throw ThriftTruncated(concat(what_, " is damaged: its Thrift metadata ends early, at byte ", pos_,
                                 "; the file is truncated or corrupt (copy or download it again)"));
  }
  return bytes_[pos_++];
}

uint64_t ThriftReader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const uint8_t b = byte();
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  bad("a varint longer than 10 bytes");
}

void ThriftReader::struct_begin() {
  AMBER_CHECK(last_ids_.size() < kMaxDepth, what_, " is damaged: Thrift structs nested deeper than ", kMaxDepth);
  last_ids_.push_back(0);
}

bool ThriftReader::next_field(int16_t& id, ThriftType& type) {
  if (last_ids_.empty()) bad("a field outside any struct");
  const uint8_t header = byte();
  const uint8_t t = header & 0x0f;
  if (t == 0) {
    last_ids_.pop_back();
    return false;
  }
  if (t > static_cast<uint8_t>(ThriftType::structure)) bad(concat("unknown field type ", int{t}));
  type = static_cast<ThriftType>(t);
  const int delta = header >> 4;
  int64_t full = delta ? last_ids_.back() + delta : zigzag();
  if (full < std::numeric_limits<int16_t>::min() || full > std::numeric_limits<int16_t>::max()) {
    bad(concat("field id ", full, " out of range"));
  }
  id = static_cast<int16_t>(full);
  last_ids_.back() = id;
  pending_bool_ = type == ThriftType::bool_true;
  return true;
}

int64_t ThriftReader::read_int(ThriftType type) {
  if (!is_int(type)) bad(concat("an integer was expected, found Thrift type ", int{static_cast<uint8_t>(type)}));
  if (type == ThriftType::i8) return static_cast<int8_t>(byte());
  const int64_t v = zigzag();
  const int64_t limit = type == ThriftType::i16   ? std::numeric_limits<int16_t>::max()
                        : type == ThriftType::i32 ? std::numeric_limits<int32_t>::max()
                                                  : std::numeric_limits<int64_t>::max();
  if (v > limit || v < -limit - 1) bad(concat("integer ", v, " out of its type's range"));
  return v;
}

bool ThriftReader::read_bool(ThriftType type) {
  if (type != ThriftType::bool_true && type != ThriftType::bool_false) bad("a boolean was expected");
  return pending_bool_;
}

std::string_view ThriftReader::read_binary(ThriftType type) {
  if (type != ThriftType::binary) bad("a string was expected");
  const uint64_t n = varint();
  if (n > bytes_.size() - pos_) {
    throw ThriftTruncated(concat(what_, " is damaged: a string of ", n, " bytes runs past the end of its Thrift ",
                                 "metadata; the file is truncated or corrupt"));
  }
  const std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
  pos_ += n;
  return s;
}

uint32_t ThriftReader::read_list(ThriftType type, ThriftType& element) {
  if (type != ThriftType::list && type != ThriftType::set) bad("a list was expected");
  const uint8_t header = byte();
  const uint8_t t = header & 0x0f;
  if (t == 0 || t > static_cast<uint8_t>(ThriftType::structure)) bad(concat("unknown element type ", int{t}));
  element = static_cast<ThriftType>(t);
  const uint64_t n = (header >> 4) == 15 ? varint() : header >> 4;
  if (n > bytes_.size() - pos_) {  // every element takes at least one byte
    throw ThriftTruncated(concat(what_, " is damaged: a list of ", n, " elements runs past the end of its Thrift ",
                                 "metadata; the file is truncated or corrupt"));
  }
  return static_cast<uint32_t>(n);
}

void ThriftReader::skip(ThriftType type) {
  // A boolean field carries its value in its type: nothing to skip.
  if (type == ThriftType::bool_true || type == ThriftType::bool_false) return;
  skip_at(type, 0);
}

// Skips one value as it appears as a list, set or map element or a non-boolean field.
void ThriftReader::skip_at(ThriftType type, int depth) {
  if (depth > kMaxDepth) bad(concat("values nested deeper than ", kMaxDepth));
  switch (type) {
    case ThriftType::bool_true:
    case ThriftType::bool_false:
    case ThriftType::i8:
      byte();
      return;
    case ThriftType::i16:
    case ThriftType::i32:
    case ThriftType::i64:
      varint();
      return;
    case ThriftType::f64:
      for (int i = 0; i < 8; ++i) byte();
      return;
    case ThriftType::binary:
      read_binary(type);
      return;
    case ThriftType::list:
    case ThriftType::set: {
      ThriftType element;
      const uint32_t n = read_list(type, element);
      for (uint32_t i = 0; i < n; ++i) skip_at(element, depth + 1);
      return;
    }
    case ThriftType::map: {
      const uint64_t n = varint();
      if (n == 0) return;
      const uint8_t kinds = byte();
      const uint8_t k = kinds >> 4, v = kinds & 0x0f;
      if (k == 0 || k > 12 || v == 0 || v > 12) bad("unknown map key or value type");
      if (n > (bytes_.size() - pos_) / 2) bad("a map longer than its bytes");
      for (uint64_t i = 0; i < n; ++i) {
        skip_at(static_cast<ThriftType>(k), depth + 1);
        skip_at(static_cast<ThriftType>(v), depth + 1);
      }
      return;
    }
    case ThriftType::structure: {
      struct_begin();
      int16_t id;
      ThriftType t;
      while (next_field(id, t)) {
        if (t != ThriftType::bool_true && t != ThriftType::bool_false) skip_at(t, depth + 1);
      }
      return;
    }
    case ThriftType::stop:
      break;
  }
  bad("a stop byte where a value was expected");
}

}  // namespace amber::data
