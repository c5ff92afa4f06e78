// The file is read from its end: "PAR1", then the footer (Thrift FileMetaData) whose
// length precedes the closing "PAR1". The schema gives the column's leaf index and
// whether it may be null; each row group's column chunk is then walked page by page,
// every size and offset checked against the chunk and the file before it is used.
#include "amber/data/parquet_reader.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <span>
#include <vector>

#include "amber/core/error.h"
#include "amber/data/parquet_codec.h"
#include "amber/data/parquet_format.h"
#include "amber/data/rle_hybrid.h"
#include "amber/data/thrift_compact.h"

namespace amber::data {
namespace {

constexpr std::string_view kMagic = "PAR1";
// Pages are about 1 MiB in practice; one larger than this is damage, not text.
constexpr int64_t kMaxPageBytes = int64_t{1} << 30;
// Page headers are a few dozen bytes, or a few KiB with string statistics: read this
// much first and more only when the header runs past it.
constexpr int64_t kHeaderWindow = 1024;

std::span<const uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

uint32_t load_u32(std::span<const uint8_t> b) {
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
         static_cast<uint32_t>(b[3]) << 24;
}

std::string rewrite_advice(const std::string& path, const std::string& column) {
  return concat("rewrite the file with pyarrow's defaults, e.g. python3 -c \"import pyarrow.parquet as pq; ",
                "pq.write_table(pq.read_table('", path, "', columns=['", column, "']), 'out.parquet', ",
                "compression='zstd')\", and pass that file");
}

class ParquetFile {
 public:
  explicit ParquetFile(const std::string& path) : path_(path), in_(path, std::ios::binary | std::ios::ate) {
    AMBER_CHECK(in_.good(), "cannot open corpus file ", path);
    size_ = static_cast<int64_t>(in_.tellg());
  }
  int64_t size() const { return size_; }
  // Reads [offset, offset + n), which the caller has checked lies inside the file.
  void read(int64_t offset, int64_t n, std::string& out) {
    out.resize(static_cast<size_t>(n));
    in_.seekg(offset);
    in_.read(out.data(), n);
    AMBER_CHECK(in_.gcount() == n, "reading corpus file ", path_, " failed at byte ", offset);
  }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t size_ = 0;
};

struct Column {
  size_t leaf = 0;  // index of its chunk in every row group
  int max_def = 0;  // 1: optional, so pages carry definition levels
};

bool text_annotation(const ParquetSchemaElement& e) {
  // Unannotated binary, UTF8/STRING, ENUM or JSON: all text.
  const bool converted_ok = e.converted_type == -1 || e.converted_type == kParquetUtf8 || e.converted_type == 4 ||
                            e.converted_type == 19;
  const bool logical_ok = e.logical_type == -1 || e.logical_type == kParquetLogicalString || e.logical_type == 4 ||
                          e.logical_type == 12;
  return converted_ok && logical_ok;
}

Column find_column(const ParquetFileMeta& m, const std::string& path, const std::string& name) {
  const std::vector<ParquetSchemaElement>& s = m.schema;
  size_t leaves = 0;
  // One past the subtree rooted at i, counting its leaves; bounded by the schema's size.
  auto subtree_end = [&](auto&& self, size_t i, int depth) -> size_t {
    AMBER_CHECK(i < s.size() && depth < 64, "corpus file ", path, " is damaged: its schema's groups claim more ",
                "columns than it lists");
    if (s[i].num_children == 0) {
      ++leaves;
      return i + 1;
    }
    size_t next = i + 1;
    for (int32_t c = 0; c < s[i].num_children; ++c) next = self(self, next, depth + 1);
    return next;
  };
  std::vector<std::string> strings;  // the top-level string columns, for the error messages
  const ParquetSchemaElement* found = nullptr;
  Column column;
  size_t i = 1;
  for (int32_t c = 0; c < s[0].num_children; ++c) {
    AMBER_CHECK(i < s.size(), "corpus file ", path, " is damaged: its schema lists fewer columns than it claims");
    const ParquetSchemaElement& e = s[i];
    if (e.num_children == 0 && e.type == kParquetByteArray && e.repetition != kParquetRepeated) strings.push_back(e.name);
    if (e.name == name && !found) {
      found = &e;
      column.leaf = leaves;
    }
    i = subtree_end(subtree_end, i, 0);
  }
  std::string listed;
  for (const std::string& n : strings) listed += (listed.empty() ? "" : ", ") + n;
  listed = strings.empty() ? "it has no top-level string column" : "its string columns: " + listed;
  AMBER_CHECK(found, "corpus file ", path, " has no column \"", name, "\"; choose the text column with --field (",
              listed, ")");
  AMBER_CHECK(found->num_children == 0 && found->repetition != kParquetRepeated, "column \"", name,
              "\" of corpus file ", path, " is nested (a list, struct or map); amber reads a top-level string ",
              "column of Parquet (", listed, "). Chat messages are read from JSONL: convert the file, e.g. ",
              "pandas.read_parquet(...).to_json('rows.jsonl', orient='records', lines=True), and pass ",
              "--chat-template");
  AMBER_CHECK(found->type == kParquetByteArray && text_annotation(*found), "column \"", name, "\" of corpus file ",
              path, " is ", parquet_type_name(found->type),
              found->type == kParquetByteArray ? " with a non-text annotation" : "", ", not a string column; choose the ",
              "text column with --field (", listed, ")");
  column.max_def = found->repetition == kParquetOptional ? 1 : 0;
  return column;
}

// Reads one column chunk's pages, calling on_value for each non-null value.
class ChunkReader {
 public:
  ChunkReader(ParquetFile& file, const ParquetColumnChunk& chunk, int max_def, const std::string& path,
              const std::string& column, size_t group, const std::function<void(std::string_view)>& on_value,
              ParquetColumnStats& stats)
      : file_(file),
        chunk_(chunk),
        max_def_(max_def),
        advice_(rewrite_advice(path, column)),
        where_(concat("column \"", column, "\" of corpus file ", path, ", row group ", group)),
        on_value_(on_value),
        stats_(stats) {}

  void read(int64_t begin, int64_t end) {
    int64_t pos = begin, seen = 0;
    for (int page = 0; seen < chunk_.num_values; ++page) {
      AMBER_CHECK(pos < end, where_, " ends after ", seen, " of its ", chunk_.num_values, " values; the file is ",
                  "truncated or corrupt");
      const std::string what = concat("page ", page, " of ", where_);
      ParquetPageHeader h;
      int64_t window = std::min(kHeaderWindow, end - pos);
      for (;;) {
        file_.read(pos, window, buf_);
        ThriftReader r(bytes_of(buf_), "the header of " + what);
        try {
          h = parse_parquet_page_header(r);
          pos += static_cast<int64_t>(r.position());
          break;
        } catch (const ThriftTruncated&) {
          if (window == end - pos) throw;
          window = std::min(window * 16, end - pos);
        }
      }
      AMBER_CHECK(h.compressed_size <= end - pos, what, " runs past the end of its column chunk; the file is ",
                  "truncated or corrupt");
      AMBER_CHECK(h.uncompressed_size <= kMaxPageBytes, what, " claims ", h.uncompressed_size, " bytes (more than ",
                  kMaxPageBytes, "); the file is corrupt");
      file_.read(pos, h.compressed_size, raw_);
      pos += h.compressed_size;
      if (h.type == ParquetPageType::index) continue;
      AMBER_CHECK(h.has_details && h.num_values >= 0, what, " is damaged: its header lacks its type's details");
      if (h.type == ParquetPageType::dictionary) {
        read_dictionary(h, what);
        continue;
      }
      AMBER_CHECK(h.num_values <= chunk_.num_values - seen, what, " holds more values than its column chunk ",
                  "claims; the file is corrupt");
      read_data(h, what);
      seen += h.num_values;
    }
  }

 private:
  void read_dictionary(const ParquetPageHeader& h, const std::string& what) {
    AMBER_CHECK(!has_dictionary_, where_, " has two dictionary pages; the file is corrupt");
    AMBER_CHECK(h.encoding == kParquetPlain || h.encoding == kParquetPlainDictionary, what, " is a dictionary in ",
                parquet_encoding_name(h.encoding), ", which amber does not read; ",
                advice_);
    parquet_decompress(static_cast<ParquetCodec>(chunk_.codec), bytes_of(raw_), static_cast<size_t>(h.uncompressed_size),
                       dictionary_bytes_, what);
    const std::span<const uint8_t> b = bytes_of(dictionary_bytes_);
    AMBER_CHECK(static_cast<uint64_t>(h.num_values) <= b.size() / 4, what, " is damaged: ", h.num_values,
                " dictionary entries cannot fit in ", b.size(), " bytes");
    dictionary_.clear();
    dictionary_.reserve(static_cast<size_t>(h.num_values));
    size_t at = 0;
    for (int32_t i = 0; i < h.num_values; ++i) dictionary_.push_back(plain_value(b, at, what));
    has_dictionary_ = true;
  }

  void read_data(const ParquetPageHeader& h, const std::string& what) {
    std::span<const uint8_t> levels, values;
    if (h.type == ParquetPageType::data) {
      parquet_decompress(static_cast<ParquetCodec>(chunk_.codec), bytes_of(raw_),
                         static_cast<size_t>(h.uncompressed_size), page_, what);
      values = bytes_of(page_);
      if (max_def_ > 0) {
        AMBER_CHECK(h.definition_level_encoding == kParquetRle, what, " stores its null markers in ",
                    parquet_encoding_name(h.definition_level_encoding), ", which amber does not read; ",
                    advice_);
        AMBER_CHECK(values.size() >= 4 && load_u32(values) <= values.size() - 4, what, " is damaged: its null ",
                    "markers run past the page");
        levels = values.subspan(4, load_u32(values));
        values = values.subspan(4 + levels.size());
      }
    } else {  // data page v2: levels uncompressed in front of the (maybe compressed) values
      const int64_t rep = h.repetition_levels_length, def = h.definition_levels_length;
      AMBER_CHECK(rep >= 0 && def >= 0 && rep + def <= h.compressed_size && rep + def <= h.uncompressed_size, what,
                  " is damaged: its level lengths exceed the page");
      const std::span<const uint8_t> b = bytes_of(raw_);
      levels = b.subspan(static_cast<size_t>(rep), static_cast<size_t>(def));
      const std::span<const uint8_t> rest = b.subspan(static_cast<size_t>(rep + def));
      if (h.is_compressed && chunk_.codec != 0) {
        parquet_decompress(static_cast<ParquetCodec>(chunk_.codec), rest,
                           static_cast<size_t>(h.uncompressed_size - rep - def), page_, what);
        values = bytes_of(page_);
      } else {
        values = rest;
      }
    }
    const bool dictionary = h.encoding == kParquetPlainDictionary || h.encoding == kParquetRleDictionary;
    AMBER_CHECK(dictionary || h.encoding == kParquetPlain, what, " is encoded ", parquet_encoding_name(h.encoding),
                ", which amber does not read (it reads PLAIN and dictionary encodings); ",
                advice_);
    AMBER_CHECK(!dictionary || has_dictionary_, what, " refers to a dictionary its column chunk lacks; the file is ",
                "corrupt");
    RleHybridDecoder defs(levels, max_def_ > 0 ? 1 : 0, what);
    RleHybridDecoder indices(dictionary && !values.empty() ? values.subspan(1) : values,
                             dictionary && !values.empty() ? values[0] : 0, what);
    size_t at = 0;
    for (int64_t i = 0; i < h.num_values;) {
      if (max_def_ > 0 && defs.next() == 0) {  // null: pass over the rest of its run at once
        const uint64_t more = std::min<uint64_t>(defs.repeats_left(), static_cast<uint64_t>(h.num_values - i - 1));
        defs.skip_repeats(more);
        stats_.nulls += 1 + static_cast<int64_t>(more);
        stats_.rows += 1 + static_cast<int64_t>(more);
        i += 1 + static_cast<int64_t>(more);
        continue;
      }
      if (dictionary) {
        const uint32_t index = indices.next();
        AMBER_CHECK(index < dictionary_.size(), what, " is damaged: dictionary index ", index, " of ",
                    dictionary_.size(), " entries");
        on_value_(dictionary_[index]);
      } else {
        on_value_(plain_value(values, at, what));
      }
      stats_.rows += 1;
      ++i;
    }
  }

  // A PLAIN BYTE_ARRAY value: a 4-byte little-endian length, then the bytes.
  static std::string_view plain_value(std::span<const uint8_t> b, size_t& at, const std::string& what) {
    AMBER_CHECK(b.size() - at >= 4 && load_u32(b.subspan(at)) <= b.size() - at - 4, what, " is damaged: a value ",
                "runs past the end of the page; the file is truncated or corrupt");
    const uint32_t n = load_u32(b.subspan(at));
    const std::string_view v(reinterpret_cast<const char*>(b.data() + at + 4), n);
    at += 4 + n;
    return v;
  }

  ParquetFile& file_;
  const ParquetColumnChunk& chunk_;
  int max_def_;
  std::string advice_;  // how to rewrite the file into what amber reads
  std::string where_;   // "column "text" of PATH, row group G", for messages
  const std::function<void(std::string_view)>& on_value_;
  ParquetColumnStats& stats_;
  std::string buf_, raw_, page_, dictionary_bytes_;
  std::vector<std::string_view> dictionary_;
  bool has_dictionary_ = false;
};

}  // namespace

ParquetColumnStats read_parquet_column(const std::string& path, const std::string& column,
                                       const std::function<void(std::string_view)>& on_value) {
  ParquetFile file(path);
  const int64_t size = file.size();
  std::string tail;
  AMBER_CHECK(size >= 12, "corpus file ", path, " starts like Parquet but is only ", size, " bytes; it is truncated");
  file.read(size - 8, 8, tail);
  AMBER_CHECK(tail.substr(4) != "PARE", "corpus file ", path, " is encrypted Parquet, which amber does not read; ",
              "decrypt it first");
  AMBER_CHECK(tail.substr(4) == kMagic, "corpus file ", path, " starts like Parquet but does not end with PAR1; ",
              "it is truncated (copy or download it again)");
  const int64_t footer_size = load_u32(bytes_of(tail));
  AMBER_CHECK(footer_size <= size - 12, "corpus file ", path, " is damaged: its footer claims ", footer_size,
              " bytes of a ", size, "-byte file");
  const int64_t footer_start = size - 8 - footer_size;
  std::string footer;
  file.read(footer_start, footer_size, footer);
  ThriftReader r(bytes_of(footer), concat("the footer of corpus file ", path));
  const ParquetFileMeta meta = parse_parquet_file_meta(r);
  const Column c = find_column(meta, path, column);

  ParquetColumnStats stats;
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    const std::string where = concat("column \"", column, "\" of corpus file ", path, ", row group ", g);
    const ParquetRowGroup& group = meta.row_groups[g];
    AMBER_CHECK(c.leaf < group.columns.size() && group.columns[c.leaf].has_meta, where, " is missing from the ",
                "footer; the file is corrupt");
    const ParquetColumnChunk& chunk = group.columns[c.leaf];
    if (chunk.num_values == 0) continue;  // an empty row group: writers give its chunk no real offset
    AMBER_CHECK(chunk.file_path.empty(), where, " lives in another file (", chunk.file_path, "), which amber does ",
                "not follow; ", rewrite_advice(path, column));
    AMBER_CHECK(chunk.type == kParquetByteArray, where, " is damaged: its chunk is ", parquet_type_name(chunk.type),
                " but the schema says BYTE_ARRAY");
    AMBER_CHECK(parquet_codec_supported(chunk.codec), where, " is compressed with ", parquet_codec_name(chunk.codec),
                ", which amber does not read (it reads UNCOMPRESSED, SNAPPY, GZIP and ZSTD); ",
                rewrite_advice(path, column));
    int64_t begin = chunk.data_page_offset;
    if (chunk.dictionary_page_offset > 0) begin = std::min(begin, chunk.dictionary_page_offset);
    AMBER_CHECK(chunk.num_values >= 0 && begin >= 4 && chunk.total_compressed_size >= 0 &&
                    chunk.total_compressed_size <= footer_start - begin,
                where, " is damaged: its pages lie outside the file's data (offset ", begin, ", ",
                chunk.total_compressed_size, " bytes)");
    ChunkReader(file, chunk, c.max_def, path, column, g, on_value, stats).read(begin, begin + chunk.total_compressed_size);
  }
  return stats;
}

}  // namespace amber::data
