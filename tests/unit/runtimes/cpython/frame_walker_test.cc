// The frame walker end to end: a live python3.11 (and, where present, pyenv 3.8-3.13) runs
// tests/data/python/walk_target.py; the test stops it, finds the interpreter in its maps, and
// follows the layout's offsets from _PyRuntime to every frame's names, file and line with
// process_vm_readv, as the BPF program will. Plus a fake memory for the edge cases, and the agent's
// FrameNamer naming the frames of a live python3.11.
#include "runtimes/cpython/frame_walker.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtimes/cpython/frame_namer.h"
#include "runtimes/cpython/interpreter_detect.h"
#include "support/subprocess.h"

namespace ember::python {
namespace {

namespace fs = std::filesystem;

const std::string kScript = std::string(EMBER_PYTHON_SCRIPTS_DIR) + "/walk_target.py";

// Line numbers of the "# MARK name" comments in the script.
std::map<std::string, int> ScriptMarks() {
  std::map<std::string, int> marks;
  std::ifstream in(kScript);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    size_t at = line.find("# MARK ");
    if (at != std::string::npos) marks[line.substr(at + 7)] = number;
  }
  return marks;
}

// A python process running the script, stopped (SIGSTOP) once it printed its thread ids, killed
// on destruction.
class StoppedPython {
 public:
  explicit StoppedPython(const std::string& python) : python_({python, "-u", kScript}) {
    if (!python_.WaitForOutput("\n", std::chrono::seconds(20))) return;
    std::istringstream words(python_.output());
    std::string ready;
    words >> ready >> main_ident_ >> main_native_ >> bg_ident_ >> bg_native_ >> c_ident_ >>
        c_native_;
    if (ready != "ready") return;
    // Let both threads get into their loops, then stop the whole thread group.
    usleep(200 * 1000);
    kill(python_.pid(), SIGSTOP);
    int status = 0;
    stopped_ = waitpid(python_.pid(), &status, WUNTRACED) == python_.pid() && WIFSTOPPED(status);
  }
  bool stopped() const { return stopped_; }
  pid_t pid() const { return python_.pid(); }
  uint64_t main_ident_ = 0, main_native_ = 0, bg_ident_ = 0, bg_native_ = 0, c_ident_ = 0,
           c_native_ = 0;

 private:
  ember::testing::Subprocess python_;
  bool stopped_ = false;
};

struct MapLine {
  uint64_t start = 0;
  uint64_t offset = 0;
  std::string path;
};

std::vector<MapLine> ReadMaps(pid_t pid) {
  std::vector<MapLine> maps;
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode >> path;
    if (path.empty() || path[0] != '/') continue;
    maps.push_back({std::stoull(range.substr(0, range.find('-')), nullptr, 16),
                    std::stoull(offset, nullptr, 16), path});
  }
  return maps;
}

// The interpreter binaries to walk: Debian's (test dependencies), then pyenv's when present.
std::vector<std::string> Interpreters() {
  std::vector<std::string> pythons = {EMBER_PYTHON311, "/usr/bin/python3.11d"};
  const fs::path root = "/root/.pyenv/versions";
  std::error_code ec;
  for (int minor = 8; minor <= 13; ++minor) {
    if (!fs::exists(root, ec)) break;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      std::string name = entry.path().filename();
      std::string prefix = "3." + std::to_string(minor) + ".";
      fs::path bin = entry.path() / "bin" / ("python3." + std::to_string(minor));
      if (name.rfind(prefix, 0) == 0 && fs::exists(bin)) pythons.push_back(bin);
    }
  }
  return pythons;
}

// Counts the reads a walk makes: the BPF program's cost is in its number of probe reads.
class CountingReader : public MemoryReader {
 public:
  explicit CountingReader(MemoryReader& inner) : inner_(inner) {}
  bool Read(uint64_t address, void* out, size_t size) override {
    ++reads;
    bytes += size;
    return inner_.Read(address, out, size);
  }
  size_t reads = 0;
  size_t bytes = 0;

 private:
  MemoryReader& inner_;
};

// The fs base of a thread of a stopped process, through ptrace: what BPF reads from
// task->thread.fsbase to match a sampled thread to its PyThreadState.
uint64_t FsBase(pid_t tid) {
  if (ptrace(PTRACE_ATTACH, tid, nullptr, nullptr) != 0) return 0;
  int status = 0;
  uint64_t fs_base = 0;
  if (waitpid(tid, &status, __WALL) == tid) {
    struct user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, tid, nullptr, &regs) == 0) fs_base = regs.fs_base;
  }
  ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  return fs_base;
}

class LiveWalkTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LiveWalkTest, WalksBothThreadsOfARunningInterpreter) {
  const std::string python = GetParam();
  bool required = python == EMBER_PYTHON311 || python == "/usr/bin/python3.11d";
  if (!fs::exists(python)) {
    ASSERT_FALSE(required) << python << " missing: apt-get install python3.11 python3.11-dbg";
    GTEST_SKIP() << python << " not on this machine";
  }
  StoppedPython process(python);
  ASSERT_TRUE(process.stopped()) << python << " did not start the script";

  std::vector<MapLine> maps = ReadMaps(process.pid());
  std::vector<std::string> paths;
  for (const MapLine& m : maps) paths.push_back(m.path);
  absl::StatusOr<InterpreterInfo> info = DetectInterpreter(paths);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->outcome, DetectOutcome::kSupported) << info->reason;
  std::optional<ProcessInterpreter> interpreter;
  for (const MapLine& m : maps) {
    if (m.path == info->path) {
      interpreter = MakeProcessInterpreter(*info, {.start = m.start, .file_offset = m.offset});
      break;
    }
  }
  ASSERT_TRUE(interpreter.has_value());
  const WalkerConfig config = interpreter->config;
  ASSERT_NE(config.runtime_address, 0u);
  ASSERT_NE(config.code_type_address, 0u);
  ASSERT_NE(interpreter->eval_frame_start, 0u);
  EXPECT_GT(interpreter->eval_frame_end, interpreter->eval_frame_start);

  ProcessMemoryReader memory(process.pid());
  uint64_t main_tstate = 0, bg_tstate = 0;
  ASSERT_EQ(FindThreadState(memory, config, {.pthread_id = process.main_ident_}, &main_tstate),
            WalkStatus::kOk);
  ASSERT_EQ(FindThreadState(memory, config, {.pthread_id = process.bg_ident_}, &bg_tstate),
            WalkStatus::kOk);
  EXPECT_NE(main_tstate, bg_tstate);
  if (config.layout.tstate_native_thread_id != kNoOffset) {
    uint64_t by_tid = 0;
    ASSERT_EQ(FindThreadState(memory, config,
                              {.native_tid = static_cast<uint32_t>(process.main_native_)}, &by_tid),
              WalkStatus::kOk);
    EXPECT_EQ(by_tid, main_tstate);
    ASSERT_EQ(FindThreadState(memory, config,
                              {.native_tid = static_cast<uint32_t>(process.bg_native_)}, &by_tid),
              WalkStatus::kOk);
    EXPECT_EQ(by_tid, bg_tstate);
  }
  uint64_t unknown = 0;
  EXPECT_EQ(FindThreadState(memory, config, {.pthread_id = 12345}, &unknown),
            WalkStatus::kNoThreadState);
  uint64_t holder = 0;
  WalkStatus gil = GilHolder(memory, config, &holder);
  uint64_t c_tstate = 0;
  ASSERT_EQ(FindThreadState(memory, config, {.pthread_id = process.c_ident_}, &c_tstate),
            WalkStatus::kOk);
  if (config.layout.runtime_tstate_current != kNoOffset && gil == WalkStatus::kOk) {
    EXPECT_TRUE(holder == main_tstate || holder == bg_tstate || holder == c_tstate);
  }

  const int minor = config.layout.minor;
  const bool qualnames = minor >= 11;
  std::map<std::string, int> marks = ScriptMarks();

  std::vector<PythonFrame> frames;
  ASSERT_EQ(WalkFrames(memory, config, main_tstate, &frames), WalkStatus::kOk);
  ASSERT_EQ(frames.size(), 5u);
  const char* names[] = {"leaf_spin", "middle_ü", "run", "main", "<module>"};
  const char* qualified[] = {"leaf_spin", "middle_ü", "Outer.run", "main", "<module>"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(frames[i].name, names[i]) << i;
    EXPECT_EQ(frames[i].qualname, qualnames ? qualified[i] : names[i]) << i;
    EXPECT_EQ(frames[i].file, kScript) << i;
    // Python-to-Python calls run in one eval loop from 3.11 on.
    EXPECT_EQ(frames[i].entry, minor <= 10 || i == 4) << i;
  }
  EXPECT_TRUE(frames[0].line == marks["leaf_loop"] || frames[0].line == marks["leaf_body"])
      << frames[0].line;
  EXPECT_EQ(frames[0].first_line, marks["leaf_loop"] - 2);
  EXPECT_EQ(frames[1].line, marks["call_leaf"]);
  EXPECT_EQ(frames[2].line, marks["call_middle"]);
  EXPECT_EQ(frames[3].line, marks["call_run"]);
  EXPECT_EQ(frames[4].line, marks["call_main"]);
  // Before 3.10 a module's first line is its first statement's.
  EXPECT_EQ(frames[4].first_line, minor >= 10 ? 1 : marks["first_statement"]);

  frames.clear();
  ASSERT_EQ(WalkFrames(memory, config, bg_tstate, &frames), WalkStatus::kOk);
  ASSERT_GE(frames.size(), 4u);
  EXPECT_EQ(frames[0].name, "späte_λ_leaf");
  EXPECT_TRUE(frames[0].line == marks["bg_loop"] || frames[0].line == marks["bg_body"]);
  EXPECT_EQ(frames[1].name, "background");
  EXPECT_EQ(frames[1].line, marks["call_bg_leaf"]);
  EXPECT_EQ(frames[2].name, "run");
  EXPECT_EQ(frames[2].qualname, qualnames ? "Thread.run" : "run");
  EXPECT_TRUE(frames[2].file.ends_with("/threading.py")) << frames[2].file;
  EXPECT_EQ(frames.back().name, "_bootstrap");
  EXPECT_TRUE(frames.back().entry);  // the thread's first eval call
  EXPECT_EQ(frames[0].entry, minor <= 10);

  // A Python function called from C (sorted's key) starts a new eval call in every version, so
  // it is an entry frame: the agent pairs it with its own _PyEval_EvalFrameDefault, below
  // sorted's native frames.
  frames.clear();
  ASSERT_EQ(WalkFrames(memory, config, c_tstate, &frames), WalkStatus::kOk);
  ASSERT_GE(frames.size(), 4u);
  EXPECT_EQ(frames[0].name, "gen_spin");
  EXPECT_TRUE(frames[0].line == marks["gen_loop"] || frames[0].line == marks["gen_body"])
      << frames[0].line;
  EXPECT_EQ(frames[1].name, "key_spin");
  EXPECT_EQ(frames[1].line, marks["call_gen"]);
  EXPECT_TRUE(frames[1].entry);
  EXPECT_EQ(frames[2].name, "c_caller");
  EXPECT_EQ(frames[2].line, marks["call_sorted"]);

  // The BPF half's cost: thread lookup plus a few small reads per frame, no strings.
  CountingReader counting(memory);
  uint64_t tstate = 0;
  ASSERT_EQ(FindThreadState(counting, config, {.pthread_id = process.bg_ident_}, &tstate),
            WalkStatus::kOk);
  size_t lookup_reads = counting.reads;
  std::vector<RawFrame> raw;
  ASSERT_EQ(WalkRawFrames(counting, config, main_tstate, &raw), WalkStatus::kOk);
  ASSERT_EQ(raw.size(), 5u);
  size_t walk_reads = counting.reads - lookup_reads;
  EXPECT_LE(walk_reads, 7 * raw.size());
  PythonFrame resolved;
  size_t before = counting.reads;
  ASSERT_EQ(ResolveFrame(counting, config, raw[0], &resolved), WalkStatus::kOk);
  EXPECT_EQ(resolved.name, "leaf_spin");
  std::printf(
      "python 3.%d: thread lookup %zu reads, raw walk of %zu frames %zu reads, "
      "resolving one frame %zu reads\n",
      minor, lookup_reads, raw.size(), walk_reads, counting.reads - before);

  // A frame budget smaller than the stack ends the walk as truncated, keeping what it read.
  frames.clear();
  EXPECT_EQ(WalkFrames(memory, config, main_tstate, &frames, {.max_frames = 2}),
            WalkStatus::kTruncated);
  EXPECT_EQ(frames.size(), 2u);

  // Another version's layout must fail cleanly, never walk this process's frames by chance.
  // 3.8-3.10 share every offset the names come from, so only layouts that differ there count.
  for (const CPythonLayout& other : AllLayouts()) {
    const CPythonLayout& l = config.layout;
    if (other.tstate_frame == l.tstate_frame && other.frame_code == l.frame_code &&
        other.frame_previous == l.frame_previous && other.code_name == l.code_name &&
        other.cframe_current_frame == l.cframe_current_frame) {
      continue;
    }
    WalkerConfig wrong = config;
    wrong.layout = other;
    uint64_t tstate = 0;
    if (FindThreadState(memory, wrong, {.pthread_id = process.main_ident_}, &tstate) !=
        WalkStatus::kOk) {
      continue;
    }
    frames.clear();
    WalkStatus status = WalkFrames(memory, wrong, tstate, &frames);
    EXPECT_TRUE(status != WalkStatus::kOk || frames.empty() || frames[0].name != "leaf_spin")
        << "3." << other.minor << " layout walked a 3." << minor << " process";
  }

  // Last, as ptrace detaching may let the stopped threads run again.
  // thread_id is pthread_self(), which on x86-64 (glibc and musl) is the thread's fs base: the
  // key BPF can read for any sampled thread without knowing its pid namespace.
  EXPECT_EQ(FsBase(static_cast<pid_t>(process.main_native_)), process.main_ident_);
  EXPECT_EQ(FsBase(static_cast<pid_t>(process.bg_native_)), process.bg_ident_);
}

INSTANTIATE_TEST_SUITE_P(Interpreters, LiveWalkTest, ::testing::ValuesIn(Interpreters()),
                         [](const auto& info) {
                           std::string name;
                           for (char c : info.param) name += std::isalnum(c) ? c : '_';
                           return name;
                         });

// A sparse fake address space for the cases a live process does not show on demand.
class FakeMemory : public MemoryReader {
 public:
  bool Read(uint64_t address, void* out, size_t size) override {
    for (const auto& [base, bytes] : blocks_) {
      if (address >= base && address - base <= bytes.size() &&
          size <= bytes.size() - (address - base)) {
        std::memcpy(out, bytes.data() + (address - base), size);
        return true;
      }
    }
    return false;
  }
  void Put(uint64_t address, std::vector<uint8_t> bytes) { blocks_[address] = std::move(bytes); }
  template <typename T>
  void PutValue(uint64_t address, T value) {
    std::vector<uint8_t> bytes(sizeof(T));
    std::memcpy(bytes.data(), &value, sizeof(T));
    Put(address, bytes);
  }

 private:
  std::map<uint64_t, std::vector<uint8_t>> blocks_;
};

// Puts a compact str object at `address`: kind 1 (ASCII or latin-1), 2 or 4.
void PutString(FakeMemory& memory, const CPythonLayout& layout, uint64_t address,
               const std::vector<uint32_t>& chars, uint32_t kind, bool ascii, bool compact = true) {
  std::vector<uint8_t> object(ascii ? layout.ascii_data : layout.compact_data);
  int64_t length = static_cast<int64_t>(chars.size());
  std::memcpy(object.data() + layout.unicode_length, &length, 8);
  uint32_t state = (kind << kUnicodeKindShift) | (compact ? kUnicodeCompactBit : 0) |
                   (ascii ? kUnicodeAsciiBit : 0);
  std::memcpy(object.data() + layout.unicode_state, &state, 4);
  for (uint32_t c : chars) {
    for (uint32_t b = 0; b < kind; ++b) object.push_back(static_cast<uint8_t>(c >> (8 * b)));
  }
  memory.Put(address, object);
}

TEST(FrameWalkerTest, StringKinds) {
  const CPythonLayout& layout = *FindLayout(3, 12);
  FakeMemory memory;
  PutString(memory, layout, 0x1000, {'a', 'b'}, 1, true);
  PutString(memory, layout, 0x2000, {'g', 0xfc}, 1, false);        // "gü"
  PutString(memory, layout, 0x3000, {0x3bb, 'x'}, 2, false);       // "λx"
  PutString(memory, layout, 0x4000, {0x1f600, 0xd800}, 4, false);  // emoji, lone surrogate
  PutString(memory, layout, 0x5000, {'a'}, 1, true, /*compact=*/false);
  std::string s;
  ASSERT_EQ(ReadPythonString(memory, layout, 0x1000, 64, &s), WalkStatus::kOk);
  EXPECT_EQ(s, "ab");
  ASSERT_EQ(ReadPythonString(memory, layout, 0x2000, 64, &s), WalkStatus::kOk);
  EXPECT_EQ(s, "gü");
  ASSERT_EQ(ReadPythonString(memory, layout, 0x3000, 64, &s), WalkStatus::kOk);
  EXPECT_EQ(s, "λx");
  ASSERT_EQ(ReadPythonString(memory, layout, 0x4000, 64, &s), WalkStatus::kOk);
  EXPECT_EQ(s, "\xf0\x9f\x98\x80\xef\xbf\xbd");
  EXPECT_NE(ReadPythonString(memory, layout, 0x5000, 64, &s), WalkStatus::kOk);
  EXPECT_NE(ReadPythonString(memory, layout, 0x9000, 64, &s), WalkStatus::kOk);  // unmapped
  EXPECT_NE(ReadPythonString(memory, layout, 0, 64, &s), WalkStatus::kOk);
  ASSERT_EQ(ReadPythonString(memory, layout, 0x3000, 2, &s),
            WalkStatus::kOk);  // cut to the byte budget
  EXPECT_EQ(s, "λ");
}

// 3.12 shape: tstate -> cframe -> frame(code A) -> shim (CSTACK) -> frame(code B) -> shim.
TEST(FrameWalkerTest, ShimFramesMarkEntriesAndLoopsAreBounded) {
  const CPythonLayout& l = *FindLayout(3, 12);
  FakeMemory memory;
  const uint64_t tstate = 0x10000, cframe = 0x11000, f1 = 0x12000, shim1 = 0x13000, f2 = 0x14000,
                 shim2 = 0x15000, code = 0x20000, type = 0x30000, name = 0x21000, table = 0x22000;
  memory.PutValue<uint64_t>(tstate + l.tstate_frame, cframe);
  memory.PutValue<uint64_t>(cframe + l.cframe_current_frame, f1);
  auto put_frame = [&](uint64_t frame, uint64_t previous, int8_t owner) {
    std::vector<uint8_t> bytes(80);
    std::memcpy(bytes.data() + l.frame_code, &code, 8);
    std::memcpy(bytes.data() + l.frame_previous, &previous, 8);
    uint64_t instr = code + l.code_adaptive + 4;
    std::memcpy(bytes.data() + l.frame_last_instruction, &instr, 8);
    bytes[l.frame_owner] = static_cast<uint8_t>(owner);
    memory.Put(frame, bytes);
  };
  put_frame(f1, shim1, 0);
  put_frame(shim1, f2, 3);
  put_frame(f2, shim2, 0);
  put_frame(shim2, 0, 3);
  std::vector<uint8_t> code_bytes(l.code_adaptive + 16);
  auto put64 = [&](uint32_t off, uint64_t v) { std::memcpy(code_bytes.data() + off, &v, 8); };
  put64(l.object_type, type);
  put64(l.code_name, name);
  put64(l.code_qualname, name);
  put64(l.code_filename, name);
  put64(l.code_linetable, table);
  int first_line = 40;
  std::memcpy(code_bytes.data() + l.code_firstlineno, &first_line, 4);
  memory.Put(code, code_bytes);
  PutString(memory, l, name, {'f'}, 1, true);
  // Location table: 2 units on line +1, 2 units on line +3 (NO_COLUMNS, svarint 6).
  std::vector<uint8_t> bytes_object(l.bytes_data);
  int64_t size = 3;
  std::memcpy(bytes_object.data() + l.var_size, &size, 8);
  for (uint8_t b : {0xd1, 0xe9, 0x06}) bytes_object.push_back(b);
  memory.Put(table, bytes_object);

  WalkerConfig config{.layout = l, .runtime_address = 0, .code_type_address = type};
  std::vector<PythonFrame> frames;
  ASSERT_EQ(WalkFrames(memory, config, tstate, &frames), WalkStatus::kOk);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_TRUE(frames[0].entry);
  EXPECT_TRUE(frames[1].entry);
  EXPECT_EQ(frames[0].line, 43);  // byte offset 4: the second entry
  EXPECT_EQ(frames[0].qualname, "f");

  // A code object of the wrong type stops the walk.
  config.code_type_address = type + 8;
  frames.clear();
  EXPECT_EQ(WalkFrames(memory, config, tstate, &frames), WalkStatus::kNotCode);

  // A cycle is refused (hostile_memory_test.cc has more).
  config.code_type_address = type;
  put_frame(shim2, f1, 3);
  frames.clear();
  EXPECT_EQ(WalkFrames(memory, config, tstate, &frames, {.max_frames = 10}),
            WalkStatus::kImplausible);
  // An unreadable previous pointer is a read failure.
  put_frame(shim2, 0xdead0000, 3);
  put_frame(shim1, 0xdead0000, 3);
  frames.clear();
  EXPECT_EQ(WalkFrames(memory, config, tstate, &frames), WalkStatus::kReadFailed);
}

// The agent's half over FrameNamer (frame_namer.h): detection from the process's mappings, the
// BPF map entry, and the frames the BPF walk would record named from the live code objects, as
// WalkFrames names them.
TEST(FrameNamerTest, DetectsAndNamesTheFramesOfALivePython) {
  ASSERT_TRUE(fs::exists(EMBER_PYTHON311)) << "apt-get install python3.11";
  StoppedPython process(EMBER_PYTHON311);
  ASSERT_TRUE(process.stopped());
  const uint32_t pid = static_cast<uint32_t>(process.pid());
  std::vector<MemoryMapping> mappings;
  for (const MapLine& m : ReadMaps(process.pid())) {
    // The namer goes by path; the file's identity is not read here.
    mappings.push_back({.start = m.start, .offset = m.offset, .file = {}, .path = m.path});
  }

  FrameNamer namer;
  bool changed = false;
  const PythonProcess& python = namer.Update(pid, mappings, "", &changed);
  EXPECT_TRUE(changed);
  ASSERT_EQ(python.outcome, DetectOutcome::kSupported) << python.reason;
  ASSERT_TRUE(python.bpf.has_value());
  EXPECT_EQ(python.interpreter, EMBER_PYTHON311);
  EXPECT_EQ(python.bpf->runtime_address, python.process.config.runtime_address);
  EXPECT_EQ(python.bpf->minor, 11);
  namer.Update(pid, mappings, "", &changed);  // the same mappings: no new detection
  EXPECT_FALSE(changed);
  ASSERT_EQ(namer.Find(pid), &python);

  ProcessMemoryReader memory(process.pid());
  const WalkerConfig& config = python.process.config;
  uint64_t tstate = 0;
  ASSERT_EQ(FindThreadState(memory, config, {.pthread_id = process.main_ident_}, &tstate),
            WalkStatus::kOk);
  std::vector<RawFrame> raw;
  ASSERT_EQ(WalkRawFrames(memory, config, tstate, &raw), WalkStatus::kOk);
  std::vector<PythonFrame> expected;
  ASSERT_EQ(WalkFrames(memory, config, tstate, &expected), WalkStatus::kOk);
  ASSERT_EQ(raw.size(), expected.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    ember_python_frame recorded{.code = raw[i].code_address,
                                .position = raw[i].last_instruction,
                                .flags = raw[i].entry ? EMBER_PYTHON_FRAME_ENTRY : 0u,
                                .reserved = 0};
    const Frame* frame = namer.Name(pid, python, recorded);
    ASSERT_NE(frame, nullptr);
    EXPECT_EQ(frame->kind, FrameKind::kCPython);
    EXPECT_EQ(frame->function, expected[i].qualname) << i;
    EXPECT_EQ(frame->source_file, expected[i].file) << i;
    EXPECT_EQ(static_cast<int>(frame->line), expected[i].line) << i;
    EXPECT_EQ(frame->module, EMBER_PYTHON311);
    EXPECT_EQ(namer.Name(pid, python, recorded), frame) << "cached";
  }
  EXPECT_EQ(namer.stats().named, raw.size());
  EXPECT_EQ(expected[2].qualname, "Outer.run");

  // Frames of a process that cannot be read any more keep a placeholder name.
  ember_python_frame gone{.code = 0x10, .position = 0x20, .flags = 0, .reserved = 0};
  const Frame* placeholder = namer.Name(0x7ffffff0, python, gone);
  EXPECT_EQ(placeholder->function, "[python]");
  EXPECT_EQ(placeholder->kind, FrameKind::kCPython);
  EXPECT_EQ(namer.stats().unreadable, 1u);

  // An exec into something else: no interpreter mapping any more.
  const PythonProcess& after = namer.Update(pid, {}, "", &changed);
  EXPECT_TRUE(changed);
  EXPECT_EQ(after.outcome, DetectOutcome::kNotPython);
  EXPECT_FALSE(after.bpf.has_value());
  namer.Forget(pid);
  EXPECT_EQ(namer.Find(pid), nullptr);
}

// A code object freed and another allocated at its address: the cached frame is checked once per
// generation (name pointer, first line) and named again, while the old frame stays valid for
// the interval that may still use it.
TEST(FrameNamerTest, ReusedCodeAddressesAreNamedAgain) {
  const CPythonLayout& l = *FindLayout(3, 12);
  FakeMemory memory;
  const uint64_t code = 0x20000, f_name = 0x21000, g_name = 0x23000, file = 0x24000,
                 table = 0x22000;
  auto put_code = [&](uint64_t name, int first_line) {
    std::vector<uint8_t> bytes(l.code_adaptive + 16);
    auto put64 = [&](uint32_t off, uint64_t v) { std::memcpy(bytes.data() + off, &v, 8); };
    put64(l.code_name, name);
    put64(l.code_qualname, name);
    put64(l.code_filename, file);
    put64(l.code_linetable, table);
    std::memcpy(bytes.data() + l.code_firstlineno, &first_line, 4);
    memory.Put(code, bytes);
  };
  PutString(memory, l, f_name, {'f'}, 1, true);
  PutString(memory, l, g_name, {'g'}, 1, true);
  PutString(memory, l, file, {'x', '.', 'p', 'y'}, 1, true);
  std::vector<uint8_t> bytes_object(l.bytes_data);
  int64_t size = 3;
  std::memcpy(bytes_object.data() + l.var_size, &size, 8);
  for (uint8_t b : {0xd1, 0xe9, 0x06}) bytes_object.push_back(b);
  memory.Put(table, bytes_object);
  put_code(f_name, 40);

  PythonProcess process;
  process.outcome = DetectOutcome::kSupported;
  process.process.config = {.layout = l, .runtime_address = 0x1000, .code_type_address = 0};
  const ember_python_frame raw{
      .code = code, .position = code + l.code_adaptive + 4, .flags = 0, .reserved = 0};
  FrameNamer namer;
  const Frame* f = namer.Name(7, process, raw, memory);
  EXPECT_EQ(f->function, "f");
  EXPECT_EQ(f->source_file, "x.py");
  EXPECT_EQ(f->line, 43u);
  namer.NextGeneration();
  EXPECT_EQ(namer.Name(7, process, raw, memory), f);  // the same code object: cached

  put_code(g_name, 60);                               // another function at the same address
  EXPECT_EQ(namer.Name(7, process, raw, memory), f);  // checked once per generation
  namer.NextGeneration();
  const Frame* g = namer.Name(7, process, raw, memory);
  EXPECT_EQ(g->function, "g");
  EXPECT_EQ(g->line, 63u);
  EXPECT_EQ(f->function, "f");  // still valid until the next generation
  EXPECT_EQ(namer.stats().renamed, 1u);
  EXPECT_EQ(namer.stats().named, 2u);
}

}  // namespace
}  // namespace ember::python
