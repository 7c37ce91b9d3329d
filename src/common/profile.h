// The symbolized profile of one export interval: what the agent hands to every output writer
// (pprof files, the flame graph, OTLP export requests).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/names.h"
#include "common/sample_arena.h"

namespace ember {

// What kind of code a frame is in. JIT frames (named from a perf map) are typed by the runtime
// that wrote the map, when the process tells which: its executable or the runtime library it maps.
enum class FrameKind : uint8_t {
  kNative,
  kKernel,
  kJit,      // JIT code of a runtime we cannot tell
  kV8Js,     // Node.js (V8)
  kJvm,      // HotSpot
  kDotnet,   // .NET CoreCLR
  kCPython,  // CPython interpreter frames
  kGo,       // Go code, named from the binary's own Go symbol table
};

// The OpenTelemetry `profile.frame.type` value of a kind. "jit" is not one of the convention's
// values; it says what we know when no runtime can be told.
constexpr std::string_view FrameTypeName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kNative:
      return "native";
    case FrameKind::kKernel:
      return "kernel";
    case FrameKind::kJit:
      return "jit";
    case FrameKind::kV8Js:
      return "v8js";
    case FrameKind::kJvm:
      return "jvm";
    case FrameKind::kDotnet:
      return "dotnet";
    case FrameKind::kCPython:
      return "cpython";
    case FrameKind::kGo:
      return "go";
  }
  return "native";
}

// A function whose code the compiler inlined at a frame's address, and where in its own source
// that address lies. Both the symbolizer and the profile use it.
struct InlineFrame {
  std::string function = {};     // demangled
  std::string source_file = {};  // empty when unknown
  uint32_t line = 0;             // 0 when unknown
  bool operator==(const InlineFrame&) const = default;
};

// One symbolized code location. Frames are owned by the agent's symbol cache and stay valid
// until the interval that references them has been written.
struct Frame {
  FrameKind kind = FrameKind::kNative;
  // Demangled function name; for a frame that cannot be named, "module+0xOFFSET".
  std::string function = {};
  std::string source_file = {};  // empty when unknown
  uint32_t line = 0;             // 0 when unknown
  // Native frames: ELF virtual address in `module`. Kernel frames: kernel address. JIT frames:
  // the process address.
  uint64_t address = 0;
  // Path of the binary as the process mapped it, or "[kernel.kallsyms]" / "[ext4]" for the kernel,
  // or for JIT frames the perf map that named them as the process sees it ("/tmp/perf-42.map").
  std::string module = {};
  std::string build_id = {};  // lower-case hex GNU build id, empty when none
  // Native frames with DWARF: the functions inlined at `address`, innermost first; `function`
  // is the out-of-line function they were inlined into, and `source_file:line` the outermost
  // call in it. Empty when the code there is not inlined. (Every member has an initializer, so
  // brace-initialized Frames may leave any out.)
  std::vector<InlineFrame> inlined{};
  // Nothing calls this frame's function: the stack is whole up to here (Go's runtime.goexit).
  bool thread_start = false;
};

// Cuts each name of `frame` to kMaxNameBytes (CapName): where the symbolizers hand frames over.
inline void CapFrameNames(Frame& frame) {
  CapName(frame.function, NameKind::kFunction);
  CapName(frame.source_file, NameKind::kSourceFile);
  CapName(frame.module, NameKind::kModule);
  CapName(frame.build_id, NameKind::kModule);
  for (InlineFrame& inlined : frame.inlined) {
    CapName(inlined.function, NameKind::kFunction);
    CapName(inlined.source_file, NameKind::kSourceFile);
  }
}

// The span a thread was serving when it was sampled, as its OpenTelemetry thread context said
// (docs/trace-context.md): W3C trace and span ids, in their wire byte order.
struct TraceLink {
  std::array<uint8_t, 16> trace_id{};  // all zero: none
  std::array<uint8_t, 8> span_id{};
  bool empty() const {
    return std::all_of(trace_id.begin(), trace_id.end(), [](uint8_t b) { return b == 0; });
  }
  bool operator==(const TraceLink&) const = default;
};

// One attribute of a sample's thread context, keyed by the name its process's key map gives.
struct SampleAttribute {
  std::string_view key;
  std::string_view value;
  bool operator==(const SampleAttribute&) const = default;
};

// What a sample says beyond its stack about the work it did: the span and the thread context's
// attributes (one per key, in record order). Empty for a thread that published none. Samples
// with different contexts are counted apart.
struct SampleContext {
  TraceLink link = {};
  std::span<const SampleAttribute> attributes = {};
  bool empty() const { return link.empty() && attributes.empty(); }
};

// One stack's count in an interval. Its names and frame list are views, of the interval's arena
// (IntervalProfile::AddSample) or of storage that outlives the interval.
struct StackSample {
  uint32_t pid = 0;
  std::string_view process;              // process name (/proc/PID/comm of the main thread)
  std::string_view thread;               // thread name at sample time
  std::span<const Frame* const> frames;  // leaf first: kernel frames, then user frames
  int64_t count = 0;
  SampleContext context = {};  // its views are of the interval's arena too
};

// A string label every sample of one process carries, e.g. {"container.id", "3e8f..."} or
// {"k8s.pod.name", "web-5d9c7b-x2x9z"} (OpenTelemetry attribute names).
struct ProcessLabel {
  std::string key;
  std::string value;
  bool operator==(const ProcessLabel&) const = default;
};

// Resource keys whose value the agent measures itself, which a process cannot override by what it
// publishes: process.pid, process.executable.*, container.id, host.* and k8s.*.
inline bool IsMeasuredResourceKey(std::string_view key) {
  return key == "process.pid" || key.starts_with("process.executable.") || key == "container.id" ||
         key.starts_with("host.") || key.starts_with("k8s.");
}

// What is known of one process beyond its samples: its executable, its container and that
// container's pod. Empty fields are unknown and left out by the writers.
struct ProcessMetadata {
  std::string executable_name = {};  // e.g. "nginx"; when empty, writers use the process name
  std::string executable_path = {};  // target of /proc/PID/exe
  std::string container_id = {};
  std::string service_name = {};  // derived from the workload (e.g. a Kubernetes deployment)
  // Further attributes of the process's own (k8s.namespace.name, k8s.pod.name, ...), in order.
  std::vector<ProcessLabel> attributes = {};
  // What the process published about itself (its OpenTelemetry process context's resource
  // attributes: service.name, service.version, ...), in order: wins over what the agent derives,
  // except the keys the agent measures (IsMeasuredResourceKey).
  std::vector<ProcessLabel> published = {};
  bool operator==(const ProcessMetadata&) const = default;
};

// Cuts each string of `metadata` to kMaxNameBytes (CapName), as label text.
inline void CapMetadataNames(ProcessMetadata& metadata) {
  for (std::string* text : {&metadata.executable_name, &metadata.executable_path,
                            &metadata.container_id, &metadata.service_name}) {
    CapName(*text, NameKind::kLabel);
  }
  for (auto* labels : {&metadata.attributes, &metadata.published}) {
    for (ProcessLabel& attribute : *labels) {
      CapName(attribute.key, NameKind::kLabel);
      CapName(attribute.value, NameKind::kLabel);
    }
  }
}

struct IntervalProfile {
  int64_t start_unix_ns = 0;
  int64_t duration_ns = 0;
  int64_t period_ns = 0;  // CPU time one sample stands for: 1e9 / sampling Hz
  std::vector<StackSample> samples;
  // Holds the names and frame lists the samples view. Moving the profile moves no sample data.
  SampleArena arena;
  // What is known of each sampled process beyond its samples, by pid; absent: nothing. Attached
  // once, before any writer runs, so that the pprof labels and the OTLP resources say the same.
  std::map<uint32_t, ProcessMetadata> process_metadata;

  // Attaches `metadata` to the samples of `pid`, its strings cut to kMaxNameBytes.
  void AttachProcessMetadata(uint32_t pid, ProcessMetadata metadata) {
    CapMetadataNames(metadata);
    process_metadata.insert_or_assign(pid, std::move(metadata));
  }

  // The metadata of `pid`; nullptr when none was attached.
  const ProcessMetadata* MetadataOf(uint32_t pid) const {
    auto it = process_metadata.find(pid);
    return it != process_metadata.end() ? &it->second : nullptr;
  }

  // Appends a sample whose names (cut to kMaxNameBytes), frames and context are copied into the
  // arena.
  StackSample& AddSample(uint32_t pid, std::string_view process, std::string_view thread,
                         std::span<const Frame* const> frames, int64_t count,
                         const SampleContext& context = {}) {
    std::string process_storage;
    std::string thread_storage;
    process = CapNameView(process, NameKind::kProcess, process_storage);
    thread = CapNameView(thread, NameKind::kThread, thread_storage);
    return samples.emplace_back(StackSample{.pid = pid,
                                            .process = arena.CopyString(process),
                                            .thread = arena.CopyString(thread),
                                            .frames = arena.CopyFrames(frames),
                                            .count = count,
                                            .context = CopyContext(context)});
  }

  // `context` with its attributes' text and list in the arena.
  SampleContext CopyContext(const SampleContext& context) {
    if (context.attributes.empty()) return {.link = context.link};
    std::vector<SampleAttribute> copied(context.attributes.begin(), context.attributes.end());
    for (SampleAttribute& attribute : copied) {
      attribute.key = arena.CopyString(attribute.key);
      attribute.value = arena.CopyString(attribute.value);
    }
    return {.link = context.link,
            .attributes = arena.CopySpan(std::span<const SampleAttribute>(copied))};
  }
};

}  // namespace ember
