// Perf maps (/tmp/perf-PID.map) are written by the profiled programs: any bytes, in any pieces.
// The input is split at a position its first byte picks and fed in two appends, as a growing file
// is read; every lookup must answer from entries that lie where they say.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "symbolize/perf_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = text.empty() ? 0 : data[0] % (text.size() + 1);
  ember::PerfMapLimits limits;
  limits.max_entries = 64;  // small, so that the limit is hit too
  limits.max_name_bytes = 4096;
  limits.max_bytes = 6144;  // entries and names together: evicts before the name cap is hit
  ember::PerfMap map(limits);
  map.Append(text.substr(0, split));
  // A shared budget may shed the oldest half between two reads.
  if (data[0] & 0x80) map.ShedOldest();
  map.Append(text.substr(split));
  for (uint64_t address : {uint64_t{0}, uint64_t{1}, uint64_t{0x1000}, uint64_t{0x7fff0000},
                           ~uint64_t{0}, ~uint64_t{0} - 1}) {
    if (auto symbol = map.Lookup(address)) {
      if (address < symbol->start || address >= symbol->end) __builtin_trap();
    }
  }
  if (map.size() > limits.max_entries || map.EstimatedBytes() > limits.max_bytes) __builtin_trap();
  map.Reset();
  map.Append(text);
  return 0;
}
