// gzip decoding for tests, by zlib: an implementation apart from the agent's (libdeflate), as
// pprof, curl and collectors read what the agent writes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ember::testing {

// The bytes of the one gzip member that is all of `gz`; nullopt when `gz` is not that (truncated,
// corrupt, another format, or bytes after the member).
std::optional<std::string> Gunzip(std::string_view gz);

}  // namespace ember::testing
