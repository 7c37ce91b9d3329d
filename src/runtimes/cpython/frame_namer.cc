// FrameNamer: interpreter detection per process and ResolveFrame over process_vm_readv, cached.
#include "runtimes/cpython/frame_namer.h"

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "runtimes/cpython/frame_walker.h"
#include "runtimes/process_memory.h"

namespace ember::python {

size_t FrameNamer::KeyHash::operator()(const Key& key) const {
  return absl::HashOf(key.pid, key.code, key.position);
}

const PythonProcess& FrameNamer::Update(uint32_t pid, std::span<const MemoryMapping> mappings,
                                        const std::string& root, bool* changed) {
  std::string key;
  std::vector<std::string> paths;
  std::vector<std::optional<FileIdentity>> identities;
  for (const MemoryMapping& mapping : mappings) {
    if (!LooksLikeInterpreterPath(mapping.path)) continue;
    paths.push_back(mapping.path);
    identities.push_back(mapping.file.inode != 0 ? std::optional(mapping.file) : std::nullopt);
    absl::StrAppend(&key, mapping.path, "@", mapping.start, "+", mapping.offset, ";");
  }
  auto [it, inserted] = processes_.try_emplace(pid);
  Tracked& tracked = it->second;
  *changed = false;
  if (!inserted && tracked.interpreter_key == key) return tracked.process;
  tracked.interpreter_key = key;
  PythonProcess result;
  if (!paths.empty()) {
    absl::StatusOr<InterpreterInfo> info = DetectInterpreter(paths, root, identities);
    if (!info.ok()) {
      result.outcome = DetectOutcome::kNotPython;
      result.reason = std::string(info.status().message());
    } else {
      result.outcome = info->outcome;
      result.reason = info->reason;
      result.version = info->version;
      std::string path = info->path.substr(root.size());
      result.interpreter = path;
      if (info->outcome == DetectOutcome::kSupported) {
        for (const MemoryMapping& mapping : mappings) {
          if (mapping.path != path) continue;
          std::optional<ProcessInterpreter> process =
              MakeProcessInterpreter(*info, {.start = mapping.start,
                                             .end = mapping.end,
                                             .file_offset = mapping.offset,
                                             .executable = mapping.executable});
          if (!process) continue;
          result.process = *process;
          result.bpf = MakeBpfPythonProc(process->config);
          break;
        }
        if (!result.bpf) {
          result.outcome = DetectOutcome::kUnsupportedVersion;
          result.reason = "its interpreter's addresses or offsets do not fit the BPF walker";
        }
      }
    }
  }
  *changed = inserted ? result.outcome != DetectOutcome::kNotPython
                      : (result.outcome != tracked.process.outcome ||
                         result.interpreter != tracked.process.interpreter ||
                         result.process.config.runtime_address !=
                             tracked.process.process.config.runtime_address);
  tracked.process = std::move(result);
  return tracked.process;
}

const PythonProcess* FrameNamer::Find(uint32_t pid) const {
  auto it = processes_.find(pid);
  return it == processes_.end() ? nullptr : &it->second.process;
}

void FrameNamer::Forget(uint32_t pid) { processes_.erase(pid); }

std::vector<uint32_t> FrameNamer::Pids() const {
  std::vector<uint32_t> pids;
  pids.reserve(processes_.size());
  for (const auto& [pid, tracked] : processes_) pids.push_back(pid);
  return pids;
}

const Frame* FrameNamer::Name(uint32_t pid, const PythonProcess& process,
                              const ember_python_frame& raw) {
  ProcessMemoryReader memory(static_cast<pid_t>(pid));
  return Name(pid, process, raw, memory);
}

const Frame* FrameNamer::Name(uint32_t pid, const PythonProcess& process,
                              const ember_python_frame& raw, MemoryReader& memory) {
  const WalkerConfig& config = process.process.config;
  const CPythonLayout& layout = config.layout;
  Key key{pid, raw.code, raw.position};
  uint64_t name_pointer = 0;
  int32_t first_line = 0;
  auto read_identity = [&] {
    // The code address came from the process: bounded before an offset is added to it.
    return raw.code <= kMaxUserAddress &&
           memory.Read(raw.code + layout.code_name, &name_pointer, sizeof(name_pointer)) &&
           memory.Read(raw.code + layout.code_firstlineno, &first_line, sizeof(first_line));
  };
  if (auto it = frames_.find(key); it != frames_.end()) {
    Entry& entry = it->second;
    // Unreadable now (the process is going): keep the name it had.
    if (entry.checked == generation_ || !read_identity() ||
        (name_pointer == entry.name_pointer && first_line == entry.first_line)) {
      entry.checked = generation_;
      entry.generation = generation_;
      return entry.frame.get();
    }
    retired_.push_back(std::move(entry.frame));
    frames_.erase(it);
    ++stats_.renamed;
  }
  PythonFrame named;
  auto frame = std::make_unique<Frame>();
  frame->kind = kPythonFrameKind;
  frame->module = process.interpreter;
  // Distinct positions are distinct locations: an instruction's address for 3.11+, the code
  // object plus its offset before.
  const LastInstruction kind = layout.last_instruction;
  frame->address =
      kind == LastInstruction::kPrevInstrPointer || kind == LastInstruction::kInstrPointer
          ? raw.position
          : raw.code + static_cast<uint32_t>(raw.position);
  Entry entry;
  entry.generation = generation_;
  entry.checked = generation_;
  const bool identified = read_identity();
  const WalkStatus status =
      identified ? ResolveFrame(memory, config, RawFrameOf(raw), &named) : WalkStatus::kReadFailed;
  if (status == WalkStatus::kOk || status == WalkStatus::kImplausible) {
    // A refused code object keeps its verdict while its identity holds; an unreadable one is
    // tried again next generation.
    entry.name_pointer = name_pointer;
    entry.first_line = first_line;
  }
  if (status == WalkStatus::kImplausible) ++stats_.implausible;
  if ((status == WalkStatus::kOk || status == WalkStatus::kImplausible) && !named.name.empty()) {
    frame->function = named.qualname.empty() ? named.name : named.qualname;
    frame->source_file = named.file;
    frame->line = named.line > 0 ? static_cast<uint32_t>(named.line) : 0;
    if (status == WalkStatus::kOk) ++stats_.named;
  } else {
    frame->function = "[python]";
    if (status != WalkStatus::kImplausible) ++stats_.unreadable;
  }
  CapFrameNames(*frame);
  entry.frame = std::move(frame);
  const Frame* out = entry.frame.get();
  frames_.emplace(key, std::move(entry));
  return out;
}

void FrameNamer::NextGeneration() {
  ++generation_;
  retired_.clear();
  for (auto it = frames_.begin(); it != frames_.end();) {
    if (it->second.generation + 2 <= generation_) {
      it = frames_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace ember::python
