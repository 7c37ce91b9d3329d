// The agent's CPython bookkeeping: which processes run a supported interpreter (detected once per
// set of mappings), and the names of the frames the BPF walk recorded for them, read from the
// processes' code objects and cached until unused for two generations.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mapping.h"
#include "common/profile.h"
#include "runtimes/cpython/bpf_proc_config.h"
#include "runtimes/cpython/interpreter_detect.h"
#include "runtimes/process_memory.h"

namespace ember::python {

struct PythonProcess {
  DetectOutcome outcome = DetectOutcome::kNotPython;
  std::string reason;       // for kUnsupportedVersion
  std::string interpreter;  // the file holding _PyRuntime, as the process maps it
  PythonVersion version;
  ProcessInterpreter process;            // valid for kSupported
  std::optional<ember_python_proc> bpf;  // the BPF map entry; nullopt: do not walk
};

struct FrameNamerStats {
  uint64_t named = 0;       // frames named from their code object
  uint64_t renamed = 0;     // cached frames whose code object's address was reused
  uint64_t unreadable = 0;  // code objects that could not be read (process gone): "[python]"
  // Code objects with a size, kind or pointer out of bounds (WalkStatus::kImplausible): named as
  // far as they passed the checks, else "[python]".
  uint64_t implausible = 0;
};

class FrameNamer {
 public:
  // The interpreter of a process from its mapped files (under `root`, e.g. "/proc/PID/root"); a
  // mapping's file identity, when set (inode not 0), is the one the file opened must have; its
  // end and whether it is code tell which segment it maps where two share a file page
  // (load_segments.h).
  // Detection runs again only when the interpreter's mapping changed (an exec). `*changed` says
  // whether the result differs from the previous call for this pid.
  const PythonProcess& Update(uint32_t pid, std::span<const MemoryMapping> mappings,
                              const std::string& root, bool* changed);
  const PythonProcess* Find(uint32_t pid) const;
  void Forget(uint32_t pid);
  std::vector<uint32_t> Pids() const;

  // The frame of one recorded Python frame of process `pid` (which Update found supported),
  // read with process_vm_readv. A cached frame is checked once per generation against its code
  // object (name pointer and first line): a code object freed and another allocated at its
  // address gets named again.
  const Frame* Name(uint32_t pid, const PythonProcess& process, const ember_python_frame& raw);
  // The same, reading the process through `memory` (tests stand in for the process).
  const Frame* Name(uint32_t pid, const PythonProcess& process, const ember_python_frame& raw,
                    MemoryReader& memory);

  // Drops frames not used in the last two generations (call after an interval is written).
  void NextGeneration();
  const FrameNamerStats& stats() const { return stats_; }

 private:
  struct Tracked {
    std::string interpreter_key;  // "path@start+offset" of the first interpreter-looking mapping
    PythonProcess process;
  };
  struct Key {
    uint32_t pid = 0;
    uint64_t code = 0;
    uint64_t position = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Entry {
    std::unique_ptr<Frame> frame;
    uint64_t generation = 0;  // last used
    uint64_t checked = 0;     // generation its code object was last checked in
    // What tells this code object from another at the same address.
    uint64_t name_pointer = 0;
    int32_t first_line = 0;
  };

  std::unordered_map<uint32_t, Tracked> processes_;
  std::unordered_map<Key, Entry, KeyHash> frames_;
  // Frames replaced after their code object's address was reused: intervals written before may
  // have used them, so they go at the next generation.
  std::vector<std::unique_ptr<Frame>> retired_;
  uint64_t generation_ = 0;
  FrameNamerStats stats_;
};

// The kind Python frames get.
inline constexpr FrameKind kPythonFrameKind = FrameKind::kCPython;

}  // namespace ember::python
