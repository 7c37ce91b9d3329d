// GzipCompress with libdeflate (Debian's libdeflate-dev).
#include "common/gzip.h"

#include <libdeflate.h>

#include "absl/strings/str_cat.h"

namespace ember {

absl::Status GzipCompress(std::string_view data, std::string* out, int level) {
  // The levels' figures: docs/benchmarks.md (libdeflate against zlib).
  libdeflate_compressor* compressor = libdeflate_alloc_compressor(level);
  if (compressor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot make a gzip compressor of level ", level));
  }
  out->resize(libdeflate_gzip_compress_bound(compressor, data.size()));
  const size_t size =
      libdeflate_gzip_compress(compressor, data.data(), data.size(), out->data(), out->size());
  libdeflate_free_compressor(compressor);
  if (size == 0) return absl::InternalError("gzip compression failed");
  out->resize(size);
  return absl::OkStatus();
}

}  // namespace ember
