// Log lines about what the profiled programs control: their names and paths are escaped and cut
// (a thread named "\x1b[2J\n..." must not rewrite an operator's terminal or forge a log line),
// and warnings a workload can repeat per file or per process are rate-limited.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/string_view.h"
#include "common/utf8.h"
#include "spdlog/spdlog.h"

namespace ember {

// Enough of a path or symbol to recognise it in a log line.
inline constexpr size_t kLogSafeMaxBytes = 512;

// `text` fit for a log line: control bytes (C0, DEL, and C1 as U+0080..U+009F), backslashes and
// bytes that are not UTF-8 become \xNN (a backslash "\\"), valid UTF-8 stays as it is. Cut
// after kLogSafeMaxBytes input bytes (on a UTF-8 boundary), then "...(N bytes)" tells the length.
inline std::string LogSafe(absl::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() < kLogSafeMaxBytes ? text.size() : kLogSafeMaxBytes);
  size_t i = 0;
  while (i < text.size() && i < kLogSafeMaxBytes) {
    const auto byte = static_cast<uint8_t>(text[i]);
    size_t len = byte < 0x80 ? 1 : Utf8SequenceLength(text, i);
    // U+0080..U+009F are C1 controls; encoded C2 80..C2 9F.
    const bool c1 = len == 2 && byte == 0xC2 && static_cast<uint8_t>(text[i + 1]) < 0xA0;
    if (byte == '\\') {
      out.append("\\\\");
      i += 1;
    } else if (len == 0 || byte < 0x20 || byte == 0x7F || c1) {
      if (len == 0) len = 1;
      for (size_t k = 0; k < len; ++k) {
        const auto b = static_cast<uint8_t>(text[i + k]);
        out.append({'\\', 'x', kHex[b >> 4], kHex[b & 15]});
      }
      i += len;
    } else {
      out.append(text.data() + i, len);
      i += len;
    }
  }
  if (i < text.size()) {
    out.append("...(");
    out.append(std::to_string(text.size()));
    out.append(" bytes)");
  }
  return out;
}

// Debian's abseil has a string_view of its own: the standard one and strings come in here.
inline std::string LogSafe(std::string_view text) {
  return LogSafe(absl::string_view(text.data(), text.size()));
}
inline std::string LogSafe(const std::string& text) { return LogSafe(absl::string_view(text)); }
inline std::string LogSafe(const char* text) { return LogSafe(absl::string_view(text)); }

// Lets through at most `max_lines` lines per `window`, so that a workload that makes the agent
// warn about each of its files or processes cannot flood the log. Thread-safe.
class LogRateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  LogRateLimiter(uint32_t max_lines, Clock::duration window)
      : max_lines_(max_lines), window_(window) {}

  // Whether a line may be logged at `now`. When it may, `*suppressed` is the number of lines
  // refused since the last one let through (0 mostly), for the caller to say so.
  bool Allow(uint64_t* suppressed, Clock::time_point now = Clock::now()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (lines_ == 0 || now - window_start_ >= window_) {
      window_start_ = now;
      lines_ = 0;
    }
    if (lines_ >= max_lines_) {
      ++suppressed_;
      return false;
    }
    ++lines_;
    *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
  }

 private:
  const uint32_t max_lines_;
  const Clock::duration window_;
  std::mutex mu_;
  Clock::time_point window_start_{};
  uint32_t lines_ = 0;  // let through in the window that began at window_start_
  uint64_t suppressed_ = 0;
};

// The usual limit of per-file and per-process lines.
inline constexpr uint32_t kLogLinesPerMinute = 20;

// Logs one line at `level` when `limiter` lets it through, saying first how many it held back.
template <typename... Args>
void LogLimited(LogRateLimiter& limiter, spdlog::level::level_enum level,
                spdlog::format_string_t<Args...> format, Args&&... args) {
  uint64_t suppressed = 0;
  if (!limiter.Allow(&suppressed)) return;
  if (suppressed > 0) spdlog::log(level, "({} similar lines suppressed)", suppressed);
  spdlog::log(level, format, std::forward<Args>(args)...);
}

}  // namespace ember
