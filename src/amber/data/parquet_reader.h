// Parquet corpora (the FineWeb / Hugging Face datasets layout): the values of one
// top-level string column, read row group by row group and page by page, so memory
// holds one page (and the chunk's dictionary), never the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace amber::data {

struct ParquetColumnStats {
  int64_t rows = 0;   // values read, nulls included
  int64_t nulls = 0;  // null values, which on_value never sees
};

// Calls on_value(text) for each non-null value of the top-level column `column` of the
// Parquet file `path`, in row order. The column must be BYTE_ARRAY (a string, or
// unannotated binary, which older writers used for text), required or optional; pages
// PLAIN or dictionary encoded, data page v1 or v2, UNCOMPRESSED, SNAPPY, GZIP or ZSTD.
// Anything else, and any damage, fails naming the file, the column and what to do.
ParquetColumnStats read_parquet_column(const std::string& path, const std::string& column,
                                       const std::function<void(std::string_view)>& on_value);

}  // namespace amber::data
