// Each struct is read field by field: a field the reader needs is decoded with its type
// checked, every other field (statistics, encodings lists, key-value metadata, indexes)
// is skipped, so files from newer writers with fields amber has never heard of still read.
#include "amber/data/parquet_format.h"

namespace amber::data {
namespace {

// Calls on_field(id, type) for each field of the struct at the reader's position;
// on_field returns false for a field it does not read, which is then skipped.
template <class OnField>
void read_struct(ThriftReader& r, OnField&& on_field) {
  r.struct_begin();
  int16_t id;
  ThriftType type;
  while (r.next_field(id, type)) {
    if (!on_field(id, type)) r.skip(type);
  }
}

// Calls on_element() once per element of the list of structs at the reader's position.
template <class OnElement>
void read_struct_list(ThriftReader& r, ThriftType type, OnElement&& on_element) {
  ThriftType element;
  const uint32_t n = r.read_list(type, element);
  AMBER_CHECK(element == ThriftType::structure, r.what(), " is damaged: a list of structs holds Thrift type ",
              int{static_cast<uint8_t>(element)});
  for (uint32_t i = 0; i < n; ++i) on_element();
}

int32_t read_i32(ThriftReader& r, ThriftType type) { return static_cast<int32_t>(r.read_int(type)); }

ParquetSchemaElement parse_schema_element(ThriftReader& r) {
  ParquetSchemaElement e;
  bool has_name = false;
  read_struct(r, [&](int16_t id, ThriftType t) {
    switch (id) {
      case 1: e.type = read_i32(r, t); return true;
      case 3: e.repetition = read_i32(r, t); return true;
      case 4: e.name = r.read_binary(t); has_name = true; return true;
      case 5: e.num_children = read_i32(r, t); return true;
      case 6: e.converted_type = read_i32(r, t); return true;
      case 10:  // LogicalType: a union, a struct with one field whose id names the member
        AMBER_CHECK(t == ThriftType::structure, r.what(), " is damaged: a schema element's logicalType is not a struct");
        read_struct(r, [&](int16_t member, ThriftType) { e.logical_type = member; return false; });
        return true;
      default: return false;
    }
  });
  AMBER_CHECK(has_name && e.num_children >= 0, r.what(), " is damaged: a schema element without a name or with a ",
              "negative child count");
  return e;
}

ParquetColumnChunk parse_column_chunk(ThriftReader& r) {
  ParquetColumnChunk c;
  read_struct(r, [&](int16_t id, ThriftType t) {
    if (id == 1) {
      c.file_path = r.read_binary(t);
      return true;
    }
    if (id != 3) return false;
    AMBER_CHECK(t == ThriftType::structure, r.what(), " is damaged: a column chunk's meta_data is not a struct");
    c.has_meta = true;
    read_struct(r, [&](int16_t mid, ThriftType mt) {
      switch (mid) {
        case 1: c.type = read_i32(r, mt); return true;
        case 4: c.codec = read_i32(r, mt); return true;
        case 5: c.num_values = r.read_int(mt); return true;
        case 7: c.total_compressed_size = r.read_int(mt); return true;
        case 9: c.data_page_offset = r.read_int(mt); return true;
        case 11: c.dictionary_page_offset = r.read_int(mt); return true;
        default: return false;
      }
    });
    return true;
  });
  return c;
}

ParquetRowGroup parse_row_group(ThriftReader& r) {
  ParquetRowGroup g;
  read_struct(r, [&](int16_t id, ThriftType t) {
    if (id == 1) {
      read_struct_list(r, t, [&] { g.columns.push_back(parse_column_chunk(r)); });
      return true;
    }
    if (id == 3) {
      g.num_rows = r.read_int(t);
      return true;
    }
    return false;
  });
  return g;
}

}  // namespace

ParquetFileMeta parse_parquet_file_meta(ThriftReader& r) {
  ParquetFileMeta m;
  read_struct(r, [&](int16_t id, ThriftType t) {
    switch (id) {
      case 2: read_struct_list(r, t, [&] { m.schema.push_back(parse_schema_element(r)); }); return true;
      case 3: m.num_rows = r.read_int(t); return true;
      case 4: read_struct_list(r, t, [&] { m.row_groups.push_back(parse_row_group(r)); }); return true;
      default: return false;
    }
  });
  AMBER_CHECK(!m.schema.empty() && m.num_rows >= 0, r.what(), " is damaged: its FileMetaData has no schema or row ",
              "count");
  return m;
}

ParquetPageHeader parse_parquet_page_header(ThriftReader& r) {
  ParquetPageHeader h;
  int32_t type = -1;
  int16_t details = 0;  // which details struct was present
  read_struct(r, [&](int16_t id, ThriftType t) {
    switch (id) {
      case 1: type = read_i32(r, t); return true;
      case 2: h.uncompressed_size = read_i32(r, t); return true;
      case 3: h.compressed_size = read_i32(r, t); return true;
      case 5:  // DataPageHeader
      case 7:  // DictionaryPageHeader
      case 8:  // DataPageHeaderV2
        AMBER_CHECK(t == ThriftType::structure, r.what(), " is damaged: a page header's details are not a struct");
        details = id;
        read_struct(r, [&](int16_t did, ThriftType dt) {
          if (did == 1) {
            h.num_values = read_i32(r, dt);
          } else if (id == 8 ? did == 4 : did == 2) {
            h.encoding = read_i32(r, dt);
          } else if (id == 5 && did == 3) {
            h.definition_level_encoding = read_i32(r, dt);
          } else if (id == 8 && did == 5) {
            h.definition_levels_length = read_i32(r, dt);
          } else if (id == 8 && did == 6) {
            h.repetition_levels_length = read_i32(r, dt);
          } else if (id == 8 && did == 7) {
            h.is_compressed = r.read_bool(dt);
          } else {
            return false;
          }
          return true;
        });
        return true;
      default: return false;
    }
  });
  AMBER_CHECK(type >= 0 && type <= 3 && h.uncompressed_size >= 0 && h.compressed_size >= 0, r.what(),
              " is damaged: a page header without a known type or its sizes");
  h.type = static_cast<ParquetPageType>(type);
  h.has_details = details == (type == 0 ? 5 : type == 2 ? 7 : type == 3 ? 8 : -1);
  return h;
}

std::string parquet_encoding_name(int32_t encoding) {
  static const char* const names[] = {"PLAIN",
                                      "GROUP_VAR_INT",
                                      "PLAIN_DICTIONARY",
                                      "RLE",
                                      "BIT_PACKED",
                                      "DELTA_BINARY_PACKED",
                                      "DELTA_LENGTH_BYTE_ARRAY",
                                      "DELTA_BYTE_ARRAY",
                                      "RLE_DICTIONARY",
                                      "BYTE_STREAM_SPLIT"};
  if (encoding >= 0 && encoding < 10) return names[encoding];
  return concat("encoding number ", encoding);
}

std::string parquet_type_name(int32_t type) {
  static const char* const names[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY",
                                      "FIXED_LEN_BYTE_ARRAY"};
  if (type >= 0 && type < 8) return names[type];
  if (type == -1) return "a group (struct, list or map)";
  return concat("type number ", type);
}

}  // namespace amber::data
