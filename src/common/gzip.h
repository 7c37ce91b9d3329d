// gzip compression for what the agent writes and sends: pprof files (.pb.gz) and OTLP/HTTP bodies.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ember {

// libdeflate's levels: 1 for what is written every interval on the node (pprof files: under half
// of zlib's fastest level's CPU, and 7% smaller), 6 for what crosses the network (OTLP/HTTP
// bodies: about zlib's default level's size, 15 to 18% below level 1's).
inline constexpr int kGzipFastest = 1;
inline constexpr int kGzipSmaller = 6;

// `data` as one gzip member in *out. An error only when no compressor could be made (or `level`
// is not 0 to 12) or compression failed.
absl::Status GzipCompress(std::string_view data, std::string* out, int level = kGzipFastest);

}  // namespace ember
