// What both transports share: the retry backoff and reading the TLS files.
#include "otlp/export_transport.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace ember {

absl::Duration BackoffDelay(int failures, absl::Duration initial, absl::Duration max,
                            double unit_random) {
  absl::Duration base = initial;
  for (int i = 1; i < failures && base < max; ++i) base *= 2;
  base = std::min(base, max);
  return std::min(max, base * (0.8 + 0.4 * unit_random));
}

std::optional<absl::Duration> RetryDelayFromStatusDetails(absl::string_view serialized_status) {
  google::rpc::Status status;
  if (serialized_status.empty() ||
      !status.ParseFromArray(serialized_status.data(),
                             static_cast<int>(serialized_status.size()))) {
    return std::nullopt;
  }
  for (const google::protobuf::Any& detail : status.details()) {
    google::rpc::RetryInfo retry;
    if (!detail.Is<google::rpc::RetryInfo>() || !detail.UnpackTo(&retry)) continue;
    absl::Duration delay = absl::Seconds(retry.retry_delay().seconds()) +
                           absl::Nanoseconds(retry.retry_delay().nanos());
    if (delay < absl::ZeroDuration()) return std::nullopt;
    return delay;
  }
  return std::nullopt;
}

std::optional<absl::Duration> ParseRetryAfter(absl::string_view value, absl::Time now) {
  value = absl::StripAsciiWhitespace(value);
  if (!value.empty() && std::all_of(value.begin(), value.end(), absl::ascii_isdigit)) {
    int64_t seconds = 0;
    if (!absl::SimpleAtoi(value, &seconds)) return std::nullopt;  // too many digits
    return absl::Seconds(seconds);
  }
  absl::Time when;
  if (!absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", value, absl::UTCTimeZone(), &when, nullptr)) {
    return std::nullopt;
  }
  return std::max(absl::ZeroDuration(), when - now);
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' cannot be read: ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!absl::StrContains(contents.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' is not PEM (no -----BEGIN line)"));
  }
  return contents.str();
}

}  // namespace ember
