// The one bound on the names and labels Ember takes from the profiled programs and their
// surroundings (function, file and process names, perf map entries, pod labels): each is cut to
// kMaxNameBytes, so that no workload can make a profile, the flame graph page or the agent's
// memory grow with the length of a name it chose.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/utf8.h"

namespace ember {

// Room for any name a real program has (the longest demangled C++ names of heavy template code
// run to a few hundred bytes), small enough that thousands of them stay cheap.
inline constexpr size_t kMaxNameBytes = 4096;
// Ends every cut name: "…" (U+2026), so a reader sees that it was cut.
inline constexpr std::string_view kNameCutMarker = "\xE2\x80\xA6";

// What a cut name named, the `name` label of ember_names_truncated_total.
enum class NameKind : uint8_t {
  kFunction,    // frame function names, inlined ones included
  kSourceFile,  // DWARF and Python source file names
  kModule,      // mapped file paths, perf map paths, build ids
  kProcess,     // process names
  kThread,      // thread names
  kLabel,       // process labels and resource attributes: container, pod, k8s labels
  kOutput,      // cut by a writer (pprof, OTLP, flame graph) for lack of an earlier cut
};
inline constexpr size_t kNameKinds = 7;

constexpr std::string_view NameKindName(NameKind kind) {
  switch (kind) {
    case NameKind::kFunction:
      return "function";
    case NameKind::kSourceFile:
      return "source_file";
    case NameKind::kModule:
      return "module";
    case NameKind::kProcess:
      return "process";
    case NameKind::kThread:
      return "thread";
    case NameKind::kLabel:
      return "label";
    case NameKind::kOutput:
      return "output";
  }
  return "output";
}

namespace names_internal {
// Process-wide: names are cut deep in the symbolizers and writers, which have no metrics of
// their own; the agent exports these (relaxed atomics, as its other counters).
inline std::array<std::atomic<uint64_t>, kNameKinds> truncated{};
}  // namespace names_internal

// Names cut by CapName since the process started.
inline uint64_t NamesTruncated(NameKind kind) {
  return names_internal::truncated[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
}

// Where to cut `name` so that the kept prefix plus kNameCutMarker fits in `max_bytes`
// (>= kNameCutMarker.size()): at most max_bytes - 3 bytes, moved back to the start of a UTF-8
// sequence that would be split. Bytes that are not UTF-8 are kept as they are (each is its own
// "sequence"); writers that need valid UTF-8 repair them.
inline size_t NameCutPoint(std::string_view name, size_t max_bytes = kMaxNameBytes) {
  const size_t cut = max_bytes - kNameCutMarker.size();
  for (size_t back = 1; back <= 3 && back <= cut; ++back) {
    const size_t start = cut - back;
    const auto lead = static_cast<uint8_t>(name[start]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = Utf8SequenceLength(absl::string_view(name.data(), name.size()), start);
    return len > back ? start : cut;  // a valid sequence running past the cut goes whole
  }
  return cut;
}

// Cuts `name` to at most `max_bytes` bytes: its prefix up to NameCutPoint, then kNameCutMarker.
// A name that fits is left alone, so capping twice cuts once. True when it cut.
inline bool CutName(std::string& name, size_t max_bytes = kMaxNameBytes) {
  if (name.size() <= max_bytes) return false;
  name.resize(NameCutPoint(name, max_bytes));
  name.append(kNameCutMarker);
  return true;
}

// CutName at kMaxNameBytes, counted by `kind` when it cuts.
inline bool CapName(std::string& name, NameKind kind) {
  if (!CutName(name)) return false;
  names_internal::truncated[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  return true;
}

// CapName of a copy; the view itself when it fits (the usual case: no copy).
inline std::string_view CapNameView(std::string_view name, NameKind kind, std::string& storage) {
  if (name.size() <= kMaxNameBytes) return name;
  storage.assign(name);
  CapName(storage, kind);
  return storage;
}

}  // namespace ember
