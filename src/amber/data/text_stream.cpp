// Raw bytes are read and decoded in 64 KiB chunks. Concatenated gzip members and zstd
// frames (what `cat a.gz b.gz` and parallel compressors write) decode as one stream; a
// file that ends inside a member or frame is reported as truncated, never as a short
// corpus.
#include "amber/data/text_stream.h"

#include <algorithm>

#include <zlib.h>
#include <zstd.h>

#include "amber/core/error.h"

namespace amber::data {
namespace {

constexpr size_t kChunk = size_t{1} << 16;

}  // namespace

class TextDecoder {
 public:
  virtual ~TextDecoder() = default;
  // Decodes from in[pos..] into out[0..cap), advancing pos; returns the bytes written.
  virtual size_t decode(const std::string& in, size_t& pos, char* out, size_t cap) = 0;
  // True while a member or frame has begun and not yet ended.
  virtual bool mid_stream() const = 0;
};

namespace {

class GzipDecoder final : public TextDecoder {
 public:
  explicit GzipDecoder(const std::string& path) : path_(path) {
    AMBER_CHECK(inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK, "cannot start a gzip decoder for ", path);
  }
  ~GzipDecoder() override { inflateEnd(&z_); }

  size_t decode(const std::string& in, size_t& pos, char* out, size_t cap) override {
    if (!in_member_) {
      if (pos == in.size()) return 0;
      inflateReset(&z_);  // the next member
      in_member_ = true;
    }
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos));
    z_.avail_in = static_cast<uInt>(in.size() - pos);
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(cap);
    const int r = inflate(&z_, Z_NO_FLUSH);
    pos = in.size() - z_.avail_in;
    if (r == Z_STREAM_END) {
      in_member_ = false;
    } else if (r != Z_OK && r != Z_BUF_ERROR) {  // Z_BUF_ERROR: no input yet, not damage
      fail("corpus file ", path_, " holds corrupt gzip data (zlib: ", z_.msg ? z_.msg : "unknown error",
           "); copy or download it again, or recompress it");
    }
    return cap - z_.avail_out;
  }

  bool mid_stream() const override { return in_member_; }

 private:
  std::string path_;
  z_stream z_{};
  bool in_member_ = false;
};

class ZstdDecoder final : public TextDecoder {
 public:
  explicit ZstdDecoder(const std::string& path) : path_(path), ds_(ZSTD_createDStream()) {
    AMBER_CHECK(ds_ != nullptr && !ZSTD_isError(ZSTD_initDStream(ds_)), "cannot start a zstd decoder for ", path);
  }
  ~ZstdDecoder() override { ZSTD_freeDStream(ds_); }

  size_t decode(const std::string& in, size_t& pos, char* out, size_t cap) override {
    // Between frames with no input left: zstd would answer with the next header's size.
    if (!in_frame_ && pos == in.size()) return 0;
    ZSTD_inBuffer src{in.data() + pos, in.size() - pos, 0};
    ZSTD_outBuffer dst{out, cap, 0};
    const size_t r = ZSTD_decompressStream(ds_, &dst, &src);
    AMBER_CHECK(!ZSTD_isError(r), "corpus file ", path_, " holds corrupt zstd data (zstd: ", ZSTD_getErrorName(r),
                "); copy or download it again, or recompress it");
    pos += src.pos;
    in_frame_ = r != 0;  // 0: a frame just ended
    return dst.pos;
  }

  bool mid_stream() const override { return in_frame_; }

 private:
  std::string path_;
  ZSTD_DStream* ds_;
  bool in_frame_ = false;
};

}  // namespace

TextStream::TextStream(const std::string& path) : path_(path), file_(path, std::ios::binary) {
  AMBER_CHECK(file_.good(), "cannot open corpus file ", path);
  read_raw();
  compression_ = sniff_compression(std::string_view(in_).substr(0, kSniffBytes), path);
  if (compression_ == Compression::gzip) decoder_ = std::make_unique<GzipDecoder>(path);
  if (compression_ == Compression::zstd) decoder_ = std::make_unique<ZstdDecoder>(path);
}

TextStream::~TextStream() = default;

size_t TextStream::read_raw() {
  in_.resize(kChunk);
  file_.read(in_.data(), static_cast<std::streamsize>(kChunk));
  AMBER_CHECK(!file_.bad(), "reading corpus file ", path_, " failed");
  in_.resize(static_cast<size_t>(file_.gcount()));
  in_pos_ = 0;
  raw_eof_ = in_.empty();
  return in_.size();
}

bool TextStream::fill() {
  out_.erase(0, out_pos_);
  out_pos_ = 0;
  const size_t before = out_.size();
  while (out_.size() == before) {
    if (in_pos_ == in_.size() && !raw_eof_) read_raw();
    const bool input_left = in_pos_ < in_.size();
    if (!decoder_) {
      if (!input_left) break;
      out_.append(in_, in_pos_);
      in_pos_ = in_.size();
      continue;
    }
    out_.resize(before + kChunk);
    const size_t made = decoder_->decode(in_, in_pos_, out_.data() + before, kChunk);
    out_.resize(before + made);
    if (made == 0 && !input_left) {  // the file is read and the decoder holds nothing back
      AMBER_CHECK(!decoder_->mid_stream(), "corpus file ", path_, " ends inside its ", compression_name(compression_),
                  " data, so it is truncated; copy or download it again");
      break;
    }
  }
  const size_t made = out_.size() - before;
  if (decoded_ < kTextCheckBytes) {
    const size_t checked = std::min(made, static_cast<size_t>(kTextCheckBytes - decoded_));
    check_text_start(std::string_view(out_).substr(before, checked), decoded_, path_);
  }
  decoded_ += static_cast<int64_t>(made);
  return made > 0;
}

bool TextStream::getline(std::string& line) {
  line.clear();
  for (;;) {
    const size_t nl = out_.find('\n', out_pos_);
    if (nl != std::string::npos) {
      line.append(out_, out_pos_, nl - out_pos_);
      out_pos_ = nl + 1;
      return true;
    }
    // No whole line buffered: keep the partial one and decode more.
    line.append(out_, out_pos_);
    out_pos_ = out_.size();
    if (!fill()) return !line.empty();
  }
}

}  // namespace amber::data
