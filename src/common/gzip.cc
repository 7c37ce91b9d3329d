// GzipCompress with libdeflate (Debian's libdeflate-dev).
#include "common/gzip.h"

#include <libdeflate.h>

namespace ember {

absl::Status GzipCompress(std::string_view data, std::string* out) {
  // libdeflate's fastest level took under half of zlib's fastest level's CPU on an interval's
  // pprof file, for a file 7% smaller; zlib's default level had taken 3 to 4 times its fastest
  // for files 15 to 18% smaller (docs/benchmarks.md).
  libdeflate_compressor* compressor = libdeflate_alloc_compressor(1);
  if (compressor == nullptr) return absl::ResourceExhaustedError("cannot make a gzip compressor");
  out->resize(libdeflate_gzip_compress_bound(compressor, data.size()));
  const size_t size =
      libdeflate_gzip_compress(compressor, data.data(), data.size(), out->data(), out->size());
  libdeflate_free_compressor(compressor);
  if (size == 0) return absl::InternalError("gzip compression failed");
  out->resize(size);
  return absl::OkStatus();
}

}  // namespace ember
