// gzip compression for what the agent writes and sends: pprof files (.pb.gz) and OTLP/HTTP bodies.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ember {

// `data` as one gzip member in *out, at libdeflate's fastest level: an always-on agent compresses
// every interval. An error only when no compressor could be made or compression failed.
absl::Status GzipCompress(std::string_view data, std::string* out);

}  // namespace ember
