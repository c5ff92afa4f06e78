// The parts of Parquet's Thrift metadata that reading a string column needs: the
// footer's FileMetaData (schema, row groups, column chunks) and each page's PageHeader.
// Field numbers follow parquet-format's parquet.thrift; fields not listed are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amber/data/thrift_compact.h"

namespace amber::data {

// Parquet's enums, as numbers in the file.
inline constexpr int32_t kParquetByteArray = 6;      // Type.BYTE_ARRAY
inline constexpr int32_t kParquetRequired = 0;       // FieldRepetitionType
inline constexpr int32_t kParquetOptional = 1;
inline constexpr int32_t kParquetRepeated = 2;
inline constexpr int32_t kParquetUtf8 = 0;           // ConvertedType.UTF8
inline constexpr int32_t kParquetLogicalString = 1;  // LogicalType's STRING member
inline constexpr int32_t kParquetPlain = 0;          // Encoding
inline constexpr int32_t kParquetPlainDictionary = 2;
inline constexpr int32_t kParquetRle = 3;
inline constexpr int32_t kParquetRleDictionary = 8;
enum class ParquetPageType : int32_t { data = 0, index = 1, dictionary = 2, data_v2 = 3 };

struct ParquetSchemaElement {
  std::string name;
  int32_t type = -1;            // absent for groups
  int32_t repetition = -1;      // absent for the root
  int32_t num_children = 0;     // 0 for leaves
  int32_t converted_type = -1;  // absent when not annotated
  int32_t logical_type = -1;    // the LogicalType union's member number, absent when not annotated
};

struct ParquetColumnChunk {
  std::string file_path;  // set when the chunk lives in another file
  bool has_meta = false;
  int32_t type = -1;
  int32_t codec = -1;
  int64_t num_values = -1;
  int64_t total_compressed_size = -1;
  int64_t data_page_offset = -1;
  int64_t dictionary_page_offset = -1;  // absent: -1
};

struct ParquetRowGroup {
  std::vector<ParquetColumnChunk> columns;
  int64_t num_rows = -1;
};

struct ParquetFileMeta {
  std::vector<ParquetSchemaElement> schema;  // depth first, the root first
  int64_t num_rows = -1;
  std::vector<ParquetRowGroup> row_groups;
};

struct ParquetPageHeader {
  ParquetPageType type = ParquetPageType::index;
  int32_t uncompressed_size = -1;
  int32_t compressed_size = -1;
  // data page (v1 or v2) and dictionary page
  int32_t num_values = -1;
  int32_t encoding = -1;
  bool has_details = false;  // the header of its type was present
  // data page v1
  int32_t definition_level_encoding = -1;
  // data page v2: levels are stored uncompressed before the values
  int32_t definition_levels_length = -1;
  int32_t repetition_levels_length = -1;
  bool is_compressed = true;
};

// Decode one structure each, failing with the reader's name for the bytes when a
// required field is missing or has the wrong type.
ParquetFileMeta parse_parquet_file_meta(ThriftReader& r);
ParquetPageHeader parse_parquet_page_header(ThriftReader& r);

std::string parquet_encoding_name(int32_t encoding);
std::string parquet_type_name(int32_t type);

}  // namespace amber::data
