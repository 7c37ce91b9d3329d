// FrameResolver on this test process itself, the way the agent resolves a sampled address: a
// native frame in inlined code carries the inlined function, with its own line. And JIT frames,
// named from a perf map in a fixture /proc tree.
#include "stacks/frame_resolver.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "runtimes/perf_map/perf_map_runtime.h"
#include "support/jitdump_image.h"

namespace ember_resolver_test {

volatile int sink;

constexpr uint32_t kInnerLine = __LINE__ + 2;
inline __attribute__((always_inline)) int Inner(int x) {
  sink = x * 5;
  return sink + 1;
}

constexpr uint32_t kCallLine = __LINE__ + 3;
__attribute__((noipa)) int Outer(int x) {
  sink = x;
  const int y = Inner(sink);
  sink = y - 2;
  return sink;
}

}  // namespace ember_resolver_test

namespace ember {
namespace {

// A resolver of this test process's own frames.
class FrameResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    self = processes.Get(static_cast<uint32_t>(getpid()));
    ASSERT_NE(self, nullptr);
  }
  ProcessTable processes;
  ModuleCache modules;
  FrameResolver resolver{&processes, &modules, nullptr};
  Process* self = nullptr;
};

TEST_F(FrameResolverTest, NativeFrameCarriesTheFunctionsInlinedAtItsAddress) {
  const auto start = reinterpret_cast<uint64_t>(&ember_resolver_test::Outer);
  const Frame* inlined = nullptr;
  int outer_frames = 0;
  for (uint64_t ip = start; ip < start + 256 && inlined == nullptr; ++ip) {
    const Frame* frame = resolver.User(self, ip, /*caller=*/false);
    ASSERT_NE(frame, nullptr);
    if (frame->function != "ember_resolver_test::Outer(int)") break;
    ++outer_frames;
    if (!frame->inlined.empty()) inlined = frame;
  }
  ASSERT_GT(outer_frames, 0) << "the test binary has no symbol for Outer";
  ASSERT_NE(inlined, nullptr) << "no address of Outer resolved into Inner's inlined body";
  EXPECT_EQ(inlined->kind, FrameKind::kNative);
  EXPECT_EQ(inlined->source_file, __FILE__);
  EXPECT_EQ(inlined->line, ember_resolver_test::kCallLine);
  ASSERT_EQ(inlined->inlined.size(), 1u);
  EXPECT_EQ(inlined->inlined[0].function, "ember_resolver_test::Inner(int)");
  EXPECT_EQ(inlined->inlined[0].source_file, __FILE__);
  EXPECT_GE(inlined->inlined[0].line, ember_resolver_test::kInnerLine);
  EXPECT_LE(inlined->inlined[0].line, ember_resolver_test::kInnerLine + 1);

  // The first instruction sets `sink = x` in Outer itself.
  const Frame* entry = resolver.User(self, start, /*caller=*/false);
  EXPECT_TRUE(entry->inlined.empty());
}

// A file whose sampled addresses are all cached frames is still in use: its module must stay
// open, or the next new address in it opens the file and reads its DWARF again (libc's,
// decompressed from libc6-dbg, took 80 ms each time, about once a minute).
TEST_F(FrameResolverTest, AModuleStaysOpenWhileOnlyItsCachedFramesAreUsed) {
  const auto start = reinterpret_cast<uint64_t>(&ember_resolver_test::Outer);
  ASSERT_EQ(resolver.User(self, start, /*caller=*/false)->function,
            "ember_resolver_test::Outer(int)");
  ASSERT_EQ(modules.stats().misses, 1u);
  // Twice the generations the cache keeps an unused module for, each with only the cached frame.
  for (int i = 0; i < 6; ++i) {
    resolver.NextGeneration();
    modules.NextGeneration();
    ASSERT_EQ(resolver.User(self, start, /*caller=*/false)->function,
              "ember_resolver_test::Outer(int)");
  }
  EXPECT_EQ(resolver.stats().misses, 1u);
  EXPECT_EQ(modules.size(), 1u);
  // A new address in the file is symbolized with the module still open.
  EXPECT_EQ(resolver.User(self, start + 1, /*caller=*/false)->function,
            "ember_resolver_test::Outer(int)");
  EXPECT_EQ(resolver.stats().misses, 2u);
  EXPECT_EQ(modules.stats().misses, 1u);
  EXPECT_EQ(modules.stats().hits, 1u);

  // Once no frame of it is used, it goes as before.
  for (int i = 0; i < 4; ++i) {
    resolver.NextGeneration();
    modules.NextGeneration();
  }
  EXPECT_EQ(modules.size(), 0u);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// A /proc tree of one process (pid 4242, pid 17 in its own namespace) with anonymous executable
// memory and a perf map in its root's /tmp.
class NodeProcessFrameTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ember-jit-resolver-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    const std::string dir = root_ + "/4242";
    std::filesystem::create_directories(dir + "/root/tmp");
    std::ofstream(dir + "/stat") << "4242 (node) R 1 4242 4242 0 -1 4194304 100 0 0 0 50 3 0 0 20 "
                                    "0 1 0 987654 10000000 200\n";
    std::ofstream(dir + "/comm") << "node\n";
    std::ofstream(dir + "/status") << "Name:\tnode\nPid:\t4242\nNSpid:\t4242\t17\n";
    std::ofstream(dir + "/maps")
        << "00400000-00401000 r-xp 00000000 fd:01 5                  /usr/bin/node\n"
           "7f0000000000-7f0000100000 rwxp 00000000 00:00 0\n"
           "7fff00000000-7fff00002000 r-xp 00000000 00:00 0          [vdso]\n";
    std::filesystem::create_symlink("/usr/bin/node", dir + "/exe");
    map_path_ = dir + "/root/tmp/perf-17.map";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void AppendToMap(const std::string& text) {
    std::ofstream(map_path_, std::ios::app | std::ios::binary) << text;
  }

  // The perf-map runtime, naming the code in no file that `resolver` meets, its perf map read
  // again at most once per `min_refresh`.
  PerfMapRuntime& NameJitCode(const ProcessTable& processes, FrameResolver& resolver,
                              std::chrono::milliseconds min_refresh = {}) {
    auto owned = std::make_unique<PerfMapRuntime>(processes, registry_,
                                                  PerfMapRuntimeLimits{.min_refresh = min_refresh});
    PerfMapRuntime& runtime = *owned;
    runtimes_.Add(std::move(owned));
    resolver.set_runtimes(&runtimes_);
    return runtime;
  }

  std::string root_;
  std::string map_path_;
  MetricsRegistry registry_;
  RuntimeSet runtimes_;
};

TEST_F(NodeProcessFrameTest, AnonymousCodeIsNamedFromThePerfMap) {
  AppendToMap("7f0000000100 80 JS:*leafAlpha /srv/app.js:3:20\n7f0000000200 40 JS:~main /srv/a");
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  NameJitCode(processes, resolver);
  Process* process = processes.Get(4242);
  ASSERT_NE(process, nullptr);

  const Frame* leaf = resolver.User(process, 0x7f0000000110, /*caller=*/false);
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(leaf->function, "JS:*leafAlpha /srv/app.js:3:20");
  EXPECT_EQ(leaf->kind, FrameKind::kV8Js);      // the executable is node
  EXPECT_EQ(leaf->module, "/tmp/perf-17.map");  // as the process names it, in its namespace
  EXPECT_EQ(leaf->address, 0x7f0000000110u);
  EXPECT_EQ(resolver.User(process, 0x7f0000000110, false), leaf);  // cached
  // A return address just past the entry belongs to the call inside it.
  EXPECT_EQ(resolver.User(process, 0x7f0000000180, /*caller=*/true)->function, leaf->function);

  // The unfinished line names nothing until its end arrives; then the next miss reads it.
  EXPECT_EQ(resolver.User(process, 0x7f0000000210, false)->function, "[anon]");
  AppendToMap("pp.js:1:1\n");
  EXPECT_EQ(resolver.User(process, 0x7f0000000210, false)->function, "JS:~main /srv/app.js:1:1");
  EXPECT_EQ(resolver.User(process, 0x7f0000000110, false)->function,
            "JS:*leafAlpha /srv/app.js:3:20");

  // Code where the maps show nothing executable (V8 flips its pages) is looked up too.
  AppendToMap("7e0000000000 100 JS:*moved /srv/app.js:9:1\n");
  EXPECT_EQ(resolver.User(process, 0x7e0000000010, false)->function, "JS:*moved /srv/app.js:9:1");
  EXPECT_EQ(resolver.User(process, 0x7d0000000010, false)->function, "[unknown]");
  // No perf map names the vdso.
  AppendToMap("7fff00000000 100 not_the_vdso\n");
  EXPECT_EQ(resolver.User(process, 0x7fff00000010, false)->function, "[vdso]");

  // Frames of the map as it is now stay cached across a generation.
  const Frame* again = resolver.User(process, 0x7f0000000110, false);
  resolver.NextGeneration();
  EXPECT_EQ(resolver.User(process, 0x7f0000000110, false), again);
}

TEST_F(NodeProcessFrameTest, FrameCacheStaysWithinItsByteLimit) {
  // 2000 JIT functions; each interval uses 100 new ones.
  constexpr uint64_t kBase = 0x7f0000010000;
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    absl::StrAppendFormat(&text, "%x 10 JS:*function_%d /srv/app.js:%d:1\n", kBase + i * 0x10, i,
                          i);
  }
  AppendToMap(text);
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  constexpr size_t kMaxBytes = 64 * 1024;
  FrameResolver resolver(&processes, &modules, nullptr, kMaxBytes);
  NameJitCode(processes, resolver);
  Process* process = processes.Get(4242);
  ASSERT_NE(process, nullptr);
  auto name = [](int i) { return absl::StrFormat("JS:*function_%d /srv/app.js:%d:1", i, i); };
  for (int interval = 0; interval < 20; ++interval) {
    for (int i = interval * 100; i < (interval + 1) * 100; ++i) {
      const Frame* frame = resolver.User(process, kBase + i * 0x10, /*caller=*/false);
      ASSERT_EQ(frame->function, name(i));
      ASSERT_LE(resolver.bytes(), kMaxBytes) << "frame " << i;
    }
    resolver.NextGeneration();
    ASSERT_LE(resolver.bytes(), kMaxBytes);
  }
  EXPECT_EQ(resolver.stats().misses, 2000u);
  EXPECT_EQ(resolver.stats().hits, 0u);
  // Evicted before the generations alone would have dropped them (three intervals hold more
  // than the limit).
  EXPECT_GT(resolver.stats().evicted, 0u);
  EXPECT_LT(resolver.size(), 300u);

  // An evicted frame is symbolized again, the same; a recent one is a hit.
  EXPECT_EQ(resolver.User(process, kBase, false)->function, name(0));
  EXPECT_EQ(resolver.stats().misses, 2001u);
  EXPECT_EQ(resolver.User(process, kBase, false)->function, name(0));
  EXPECT_EQ(resolver.User(process, kBase + 1999 * 0x10, false)->function, name(1999));
  EXPECT_EQ(resolver.stats().hits, 2u);
}

TEST_F(NodeProcessFrameTest, WithoutAPerfMapAnonymousCodeKeepsItsMarker) {
  ProcessTable processes(root_, std::chrono::hours(1));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  NameJitCode(processes, resolver, std::chrono::hours(1));
  Process* process = processes.Get(4242);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(resolver.User(process, 0x7f0000000110, false)->function, "[anon]");
  // The map appears, but the last look was under an hour ago: no new read (rate limit).
  AppendToMap("7f0000000100 80 late\n");
  EXPECT_EQ(resolver.User(process, 0x7f0000000110, false)->function, "[anon]");
}

// V8 with --perf-prof and no perf map: the jitdump it maps (in its working directory) names its
// code, with lines from its debug info; appended records are read on a miss.
TEST_F(NodeProcessFrameTest, AnonymousCodeIsNamedFromTheJitdumpTheProcessMaps) {
  const std::string dump_path = root_ + "/4242/root/srv/jit-17.dump";
  std::filesystem::create_directories(root_ + "/4242/root/srv");
  testing::JitDumpImage image;
  image
      .DebugInfo(0x7f0000000100, {{0x7f0000000100 + 64, 12, "/srv/app.js"},
                                  {0x7f0000000100 + 64 + 0x30, 13, "\xff"}})
      .CodeLoad(0x7f0000000100, 0x80, "JS:*leafAlpha /srv/app.js:12:3");
  std::ofstream(dump_path, std::ios::binary) << image.bytes();
  struct stat st;
  ASSERT_EQ(stat(dump_path.c_str(), &st), 0);
  std::ofstream(root_ + "/4242/maps") << absl::StrFormat(
      "00400000-00401000 r-xp 00000000 fd:01 5                  /usr/bin/node\n"
      "7f0000000000-7f0000100000 rwxp 00000000 00:00 0\n"
      "7f1000000000-7f1000001000 r-xp 00000000 %02x:%02x %d          /srv/jit-17.dump\n",
      major(st.st_dev), minor(st.st_dev), st.st_ino);
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  PerfMapRuntime& jit = NameJitCode(processes, resolver);
  Process* process = processes.Get(4242);
  ASSERT_NE(process, nullptr);

  const Frame* leaf = resolver.User(process, 0x7f0000000110, /*caller=*/false);
  EXPECT_EQ(leaf->function, "JS:*leafAlpha /srv/app.js:12:3");
  EXPECT_EQ(leaf->kind, FrameKind::kV8Js);
  EXPECT_EQ(leaf->module, "/srv/jit-17.dump");
  EXPECT_EQ(leaf->source_file, "/srv/app.js");
  EXPECT_EQ(leaf->line, 12u);
  EXPECT_EQ(resolver.User(process, 0x7f0000000140, false)->line, 13u);
  EXPECT_EQ(resolver.User(process, 0x7f0000000210, false)->function, "[anon]");
  // The runtime compiles more: appended, read at the next miss.
  std::ofstream(dump_path, std::ios::app | std::ios::binary)
      << testing::JitDumpImage()
             .CodeLoad(0x7f0000000200, 0x40, "JS:*leafBeta /srv/app.js:30:1")
             .bytes()
             .substr(40);
  EXPECT_EQ(resolver.User(process, 0x7f0000000210, false)->function,
            "JS:*leafBeta /srv/app.js:30:1");
  EXPECT_EQ(jit.HeldBytes(), jit.Find(4242)->jitdump->dump().EstimatedBytes());
}

// A JVM's jitdump (perf's JVMTI agent) gives debug-info addresses as perf reads them, the
// code's own: no V8 header offset is taken off.
TEST_F(NodeProcessFrameTest, AJvmJitdumpsLinesAreAtTheCodesOwnAddresses) {
  std::filesystem::remove(root_ + "/4242/exe");
  std::filesystem::create_symlink("/usr/lib/jvm/bin/java", root_ + "/4242/exe");
  std::ofstream(root_ + "/4242/root/tmp/jit-17.dump", std::ios::binary)
      << testing::JitDumpImage()
             .DebugInfo(0x7f0000000100,
                        {{0x7f0000000100, 40, "App.java"}, {0x7f0000000100 + 0x30, 41, "\xff"}})
             .CodeLoad(0x7f0000000100, 0x80, "App::run")
             .bytes();
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  NameJitCode(processes, resolver);
  Process* process = processes.Get(4242);
  ASSERT_NE(process, nullptr);
  const Frame* leaf = resolver.User(process, 0x7f0000000110, /*caller=*/false);
  EXPECT_EQ(leaf->function, "App::run");
  EXPECT_EQ(leaf->kind, FrameKind::kJvm);
  EXPECT_EQ(leaf->line, 40u);
  EXPECT_EQ(resolver.User(process, 0x7f0000000130, false)->line, 41u);
}

// .NET writes its jitdump to /tmp: found there without a mapping.
TEST_F(NodeProcessFrameTest, AJitdumpInTmpIsFoundWithoutAMapping) {
  std::ofstream(root_ + "/4242/root/tmp/jit-17.dump", std::ios::binary)
      << testing::JitDumpImage().CodeLoad(0x7f0000000100, 0x80, "void [App] App::Hot()").bytes();
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  NameJitCode(processes, resolver);
  Process* process = processes.Get(4242);
  ASSERT_NE(process, nullptr);
  const Frame* frame = resolver.User(process, 0x7f0000000110, false);
  EXPECT_EQ(frame->function, "void [App] App::Hot()");
  EXPECT_EQ(frame->module, "/tmp/jit-17.dump");
}

TEST_F(NodeProcessFrameTest, AReplacedMapIsReadAgain) {
  AppendToMap("7f0000000100 80 first_program\n");
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  NameJitCode(processes, resolver);
  Process* process = processes.Get(4242);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(resolver.User(process, 0x7f0000000110, false)->function, "first_program");
  // Rewritten in place, as jcmd Compiler.perfmap does: old entries go, new ones come.
  std::ofstream(map_path_, std::ios::trunc) << "0x7f0000000300 0x80 void Phases.leafBeta()\n";
  EXPECT_EQ(resolver.User(process, 0x7f0000000110, false)->function, "first_program")
      << "a cached frame stays until a miss reads the map again";
  EXPECT_EQ(resolver.User(process, 0x7f0000000310, false)->function, "void Phases.leafBeta()");
  EXPECT_EQ(resolver.User(process, 0x7f0000000110, false)->function, "[anon]");
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// The resolver answers an address it resolved a moment ago from a small table of recent frames:
// a process that maps another file at the same address (an exec, a dlclose and dlopen) must get
// that file's frames once its maps are read again.
TEST_F(NodeProcessFrameTest, AnotherFileMappedAtAnAddressNamesItsFramesOnceTheMapsAreReadAgain) {
  const std::string maps = root_ + "/4242/maps";
  std::ofstream(maps, std::ios::trunc)
      << "00400000-00401000 r-xp 00000000 fd:01 5                  /usr/bin/node\n"
         "7f1000000000-7f1000010000 r-xp 00000000 fd:01 71         /opt/first/libwork.so\n";
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  Process* process = processes.Get(4242);
  ASSERT_NE(process, nullptr);
  const Frame* first = resolver.User(process, 0x7f1000000100, /*caller=*/true);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->module, "/opt/first/libwork.so");
  EXPECT_EQ(resolver.User(process, 0x7f1000000100, true), first);
  resolver.NextGeneration();
  EXPECT_EQ(resolver.User(process, 0x7f1000000100, true), first);  // still cached, same frame

  std::ofstream(maps, std::ios::trunc)
      << "00400000-00401000 r-xp 00000000 fd:01 5                  /usr/bin/node\n"
         "7f1000000000-7f1000010000 r-xp 00000000 fd:01 72         /opt/second/libwork.so\n";
  ASSERT_TRUE(processes.ReloadMaps(process));
  const Frame* second = resolver.User(process, 0x7f1000000100, true);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->module, "/opt/second/libwork.so");
  EXPECT_EQ(second->address, first->address);

  // Unused for two generations, the frame is dropped: it is made again, not taken from the
  // recent frames (which would hand out a freed one).
  for (int i = 0; i < 3; ++i) resolver.NextGeneration();
  EXPECT_EQ(resolver.size(), 0u);
  const uint64_t misses = resolver.stats().misses;
  EXPECT_EQ(resolver.User(process, 0x7f1000000100, true)->module, "/opt/second/libwork.so");
  EXPECT_EQ(resolver.stats().misses, misses + 1);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// A module loaded after the kernel's symbols were read: its frames take the name of the last
// symbol below them until the table is read again, and then the module's own.
// A separate debug file that is not at hand when a stripped program's frames are first
// symbolized (a debuginfod fetch under way) names them in place once it arrives: the frame
// handed out before is the one renamed, so the samples of the interval holding it are named.
class LateDebugFileTest : public ::testing::Test, public DebugFileSource {
 protected:
  void SetUp() override {
    const std::string fixtures = EMBER_SYMBOLIZE_FIXTURE_DIR;
    const std::string binary = fixtures + "/buildid/ember_sym_fixture_nolink";
    char pattern[] = "/tmp/ember-late-debug-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    const std::string dir = root_ + "/4243";
    std::filesystem::create_directories(dir + "/root/bin");
    std::filesystem::copy_file(binary, dir + "/root/bin/prog");
    struct stat st;
    ASSERT_EQ(stat((dir + "/root/bin/prog").c_str(), &st), 0);
    std::ofstream(dir + "/stat") << "4243 (prog) R 1 4243 4243 0 -1 4194304 100 0 0 0 50 3 0 0 "
                                    "20 0 1 0 987655 10000000 200\n";
    std::ofstream(dir + "/comm") << "prog\n";
    std::ofstream(dir + "/status") << "Name:\tprog\nPid:\t4243\nNSpid:\t4243\n";
    std::ofstream(dir + "/maps") << absl::StrFormat(
        "00400000-00500000 r-xp 00000000 %02x:%02x %u                  /bin/prog\n",
        major(st.st_dev), minor(st.st_dev), static_cast<unsigned>(st.st_ino));
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(fixtures + "/buildid_debug")) {
      if (entry.path().extension() == ".debug") debug_file_ = entry.path();
    }
    ASSERT_FALSE(debug_file_.empty());
    // The entry point's file offset: the program maps from offset 0 at 0x400000 here.
    Elf* elf = nullptr;
    const int fd = open(binary.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    elf_version(EV_CURRENT);
    elf = elf_begin(fd, ELF_C_READ, nullptr);
    GElf_Ehdr ehdr;
    ASSERT_NE(gelf_getehdr(elf, &ehdr), nullptr);
    size_t count = 0;
    elf_getphdrnum(elf, &count);
    for (size_t i = 0; i < count; ++i) {
      GElf_Phdr phdr;
      if (gelf_getphdr(elf, static_cast<int>(i), &phdr) != nullptr && phdr.p_type == PT_LOAD &&
          ehdr.e_entry >= phdr.p_vaddr && ehdr.e_entry < phdr.p_vaddr + phdr.p_filesz) {
        entry_offset_ = ehdr.e_entry - phdr.p_vaddr + phdr.p_offset;
      }
    }
    elf_end(elf);
    close(fd);
    ASSERT_NE(entry_offset_, 0u);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::optional<std::string> Find(const std::string& build_id) override {
    asked_.push_back(build_id);
    if (!arrived_) return std::nullopt;
    return served_.empty() ? debug_file_.string() : served_;
  }

  std::string root_;
  std::filesystem::path debug_file_;
  uint64_t entry_offset_ = 0;
  std::vector<std::string> asked_;
  bool arrived_ = false;
  std::string served_;  // what Find hands out instead of the debug file, when set
};

TEST_F(LateDebugFileTest, CachedFramesAreNamedInPlaceWhenTheDebugFileArrives) {
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules(
      16, ElfModuleOptions{.debug_dir = root_ + "/no-debug-dir", .debug_file_source = this});
  FrameResolver resolver(&processes, &modules, nullptr);
  Process* process = processes.Get(4243);
  ASSERT_NE(process, nullptr);
  const Frame* frame = resolver.User(process, 0x400000 + entry_offset_, /*caller=*/false);
  ASSERT_NE(frame, nullptr);
  EXPECT_EQ(frame->function, absl::StrFormat("prog+0x%x", entry_offset_));
  ASSERT_EQ(asked_.size(), 1u);
  const std::string build_id = asked_[0];
  EXPECT_EQ(modules.AwaitedBuildIds(), std::vector<std::string>{build_id});

  // Another build id's arrival changes nothing.
  EXPECT_TRUE(modules.DebugFileArrived("00ff").empty());
  // A file of another build id handed out as this one's is refused: still unnamed, still awaited.
  arrived_ = true;
  served_ = EMBER_SYMBOLIZE_FIXTURE_DIR "/libember_sym_fixture_lib.so";
  std::vector<FileIdentity> files = modules.DebugFileArrived(build_id);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(resolver.Rename(files), 0u);
  EXPECT_EQ(frame->function, absl::StrFormat("prog+0x%x", entry_offset_));
  EXPECT_EQ(modules.AwaitedBuildIds(), std::vector<std::string>{build_id});

  served_.clear();
  files = modules.DebugFileArrived(build_id);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(resolver.Rename(files), 1u);
  // The same frame, named now.
  EXPECT_EQ(frame->function, "_start");
  EXPECT_TRUE(modules.AwaitedBuildIds().empty());
  EXPECT_EQ(resolver.User(process, 0x400000 + entry_offset_, /*caller=*/false), frame);
  // Nothing waits any more: a second arrival reloads nothing.
  EXPECT_TRUE(modules.DebugFileArrived(build_id).empty());
}

TEST(KernelFrameTest, ReplacedKernelSymbolsRenameCachedKernelFrames) {
  constexpr char kImage[] =
      "ffffffff81000000 T _stext\nffffffff81000100 T schedule\nffffffff83000000 T _einittext\n";
  absl::StatusOr<KernelSymbols> before = KernelSymbols::Parse(kImage);
  absl::StatusOr<KernelSymbols> after =
      KernelSymbols::Parse(std::string(kImage) + "ffffffffc0a01000 t nf_hook_slow\t[nf_tables]\n");
  ASSERT_TRUE(before.ok() && after.ok());
  ProcessTable processes;
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, &*before);
  const Frame* stale = resolver.Kernel(0xffffffffc0a01010, /*caller=*/false);
  EXPECT_EQ(stale->function, "_einittext");
  EXPECT_EQ(resolver.Kernel(0xffffffff81000110, /*caller=*/false)->function, "schedule");
  EXPECT_EQ(resolver.stats().kernel_misses_past_image, 1u);  // the module's frame only

  resolver.NextGeneration();
  resolver.ReplaceKernelSymbols(&*after);
  const Frame* named = resolver.Kernel(0xffffffffc0a01010, /*caller=*/false);
  EXPECT_EQ(named->function, "nf_hook_slow");
  EXPECT_EQ(named->module, "[nf_tables]");
  EXPECT_EQ(resolver.Kernel(0xffffffff81000110, /*caller=*/false)->function, "schedule");
  // Counted again: above the image, whether the table names it or not.
  EXPECT_EQ(resolver.stats().kernel_misses_past_image, 2u);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// This test process's own vDSO: glibc's dynamic linker lists it as linux-vdso.so.1, so dlsym
// finds its functions, independently of the image parser.
TEST_F(FrameResolverTest, VdsoFramesAreNamedFromTheKernelsImage) {
  void* vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(vdso, nullptr) << dlerror();
  const auto clock = reinterpret_cast<uint64_t>(dlsym(vdso, "__vdso_clock_gettime"));
  const auto time = reinterpret_cast<uint64_t>(dlsym(vdso, "__vdso_time"));
  ASSERT_NE(clock, 0u);
  ASSERT_NE(time, 0u);
  const Frame* leaf = resolver.User(self, clock + 4, /*caller=*/false);
  EXPECT_EQ(leaf->function, "__vdso_clock_gettime");
  EXPECT_EQ(leaf->module, "[vdso]");
  EXPECT_EQ(leaf->kind, FrameKind::kNative);
  EXPECT_EQ(resolver.User(self, clock + 5, /*caller=*/true)->function, "__vdso_clock_gettime");
  EXPECT_EQ(resolver.User(self, time, /*caller=*/false)->function, "__vdso_time");
  EXPECT_EQ(resolver.User(self, clock + 4, /*caller=*/false), leaf);  // cached
  EXPECT_EQ(resolver.failures().vdso_unreadable, 0u);
  dlclose(vdso);
}

// Processes with another vDSO image (a 32-bit process's), or none the agent can read, in a fixture
// /proc tree whose mem files hold what their [vdso] mappings would.
class OtherVdsoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ember-vdso-resolver-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // A process whose [vdso] at kVdsoStart holds `image` (no mem file when nullopt).
  void AddProcess(uint32_t pid, std::optional<std::string> image) {
    const std::string dir = absl::StrFormat("%s/%d", root_, pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/stat") << pid
                                 << " (app) R 1 1 1 0 -1 4194304 100 0 0 0 50 3 0 0 20 0 1 0 "
                                    "987654 10000000 200\n";
    std::ofstream(dir + "/comm") << "app\n";
    std::ofstream(dir + "/maps") << absl::StrFormat(
        "00400000-00401000 r-xp 00000000 fd:01 5                  /usr/bin/app\n"
        "%08x-%08x r-xp 00000000 00:00 0          [vdso]\n",
        kVdsoStart, kVdsoStart + kVdsoSize);
    if (image) {
      std::ofstream mem(dir + "/mem", std::ios::binary);
      mem.seekp(kVdsoStart);
      mem << *image << std::string(kVdsoSize - image->size(), '\0');
    }
  }

  // The agent's own vDSO image, where its __vdso_time starts, and a copy of it whose
  // __vdso_time is named __vdso_pwnd (its build-id note kept): false when any is not at hand.
  bool ReadOwnImage() {
    absl::StatusOr<std::string> own = VdsoImage::OwnImageBytes();
    if (!own.ok() || own->size() > kVdsoSize) return false;
    absl::StatusOr<std::unique_ptr<VdsoImage>> parsed = VdsoImage::Parse(*own);
    if (!parsed.ok()) return false;
    for (time_offset_ = 0; time_offset_ < own->size(); ++time_offset_) {
      if ((*parsed)->Symbolize(time_offset_) == "__vdso_time") break;
    }
    const size_t at = own->find(std::string("__vdso_time\0", 12));
    if (time_offset_ == own->size() || at == std::string::npos) return false;
    own_ = *own;
    renamed_ = *own;
    renamed_.replace(at, 11, "__vdso_pwnd");
    return true;
  }

  static constexpr uint64_t kVdsoStart = 0x00700000;
  static constexpr uint64_t kVdsoSize = 0x10000;
  std::string root_;
  std::string own_;
  std::string renamed_;
  uint64_t time_offset_ = 0;
};

TEST_F(OtherVdsoTest, EachProcessIsNamedFromItsOwnImage) {
  std::ifstream in(std::string(EMBER_SYMBOLIZE_FIXTURE_DIR) + "/vdso32_like.so", std::ios::binary);
  const std::string image32((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(image32.size(), 0u);
  ASSERT_LE(image32.size(), kVdsoSize);
  absl::StatusOr<std::unique_ptr<VdsoImage>> parsed32 = VdsoImage::Parse(image32);
  ASSERT_TRUE(parsed32.ok());
  absl::StatusOr<std::string> own = VdsoImage::OwnImageBytes();
  ASSERT_TRUE(own.ok());
  ASSERT_LE(own->size(), kVdsoSize);
  // An offset in the 32-bit image's __vdso_time, and whatever the 64-bit image has there.
  uint64_t offset32 = 0;
  for (; offset32 < image32.size(); ++offset32) {
    if ((*parsed32)->Symbolize(offset32) == "__vdso_time") break;
  }
  ASSERT_LT(offset32, image32.size());

  AddProcess(100, image32);
  AddProcess(101, *own);
  AddProcess(102, std::nullopt);
  AddProcess(103, std::string(0x1000, 'x'));
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);

  const Frame* compat = resolver.User(processes.Get(100), kVdsoStart + offset32, false);
  EXPECT_EQ(compat->function, "__vdso_time");
  EXPECT_EQ(compat->module, "[vdso]");
  EXPECT_EQ(compat->build_id, (*parsed32)->build_id());
  const Frame* native = resolver.User(processes.Get(101), kVdsoStart + offset32, false);
  EXPECT_NE(native, compat);
  EXPECT_EQ(native->function,
            (*VdsoImage::Parse(*own))->Symbolize(offset32).value_or(native->function));
  EXPECT_EQ(resolver.failures().vdso_unreadable, 0u);
  // Unreadable or not an image: the marker, counted once per process.
  EXPECT_EQ(resolver.User(processes.Get(102), kVdsoStart + 0x10, false)->function, "[vdso]");
  EXPECT_EQ(resolver.User(processes.Get(102), kVdsoStart + 0x20, false)->function, "[vdso]");
  EXPECT_EQ(resolver.User(processes.Get(103), kVdsoStart + 0x10, false)->function, "[vdso]");
  EXPECT_EQ(resolver.failures().vdso_unreadable, 2u);
}

// A process that rewrote its vDSO, keeping the kernel's build-id note, names its own frames
// only: the other processes' frames at the same offsets keep the kernel's names.
TEST_F(OtherVdsoTest, ARewrittenImageNamesNoOtherProcesssFrames) {
  ASSERT_TRUE(ReadOwnImage());
  const uint64_t offset = time_offset_;

  AddProcess(100, renamed_);
  AddProcess(101, own_);
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  EXPECT_EQ(resolver.User(processes.Get(100), kVdsoStart + offset, false)->function, "__vdso_pwnd");
  EXPECT_EQ(resolver.User(processes.Get(101), kVdsoStart + offset, false)->function, "__vdso_time");
}

// An exec maps a new vDSO, here at the same address: its image is read again, whether the exec
// shows in the maps (another executable) or is told (the main thread renamed).
TEST_F(OtherVdsoTest, AnExecReadsTheImageAgain) {
  ASSERT_TRUE(ReadOwnImage());
  const uint64_t offset = time_offset_;

  AddProcess(100, own_);
  ProcessTable processes(root_, std::chrono::hours(1));
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  Process* process = processes.Get(100);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(resolver.User(process, kVdsoStart + offset, false)->function, "__vdso_time");

  AddProcess(100, renamed_);  // the same maps, another image
  std::filesystem::create_symlink("/usr/bin/other", root_ + "/100/exe");
  ASSERT_TRUE(processes.ReloadMaps(process));
  EXPECT_EQ(resolver.User(process, kVdsoStart + offset, false)->function, "__vdso_pwnd");

  AddProcess(100, own_);  // the same program again: only the rename tells
  ASSERT_TRUE(processes.ReloadAfterExec(process));
  EXPECT_EQ(resolver.User(process, kVdsoStart + offset, false)->function, "__vdso_time");
  EXPECT_EQ(resolver.failures().vdso_unreadable, 0u);
}

// A failed read is tried again a few times, no more often than the maps are re-read.
TEST_F(OtherVdsoTest, AFailedReadIsRetriedAFewTimes) {
  ASSERT_TRUE(ReadOwnImage());
  const uint64_t offset = time_offset_;
  AddProcess(100, std::nullopt);
  AddProcess(101, std::nullopt);
  AddProcess(102, std::nullopt);
  ProcessTable fast(root_, std::chrono::milliseconds(0));
  ProcessTable slow(root_, std::chrono::hours(1));
  ModuleCache modules;
  FrameResolver retrying(&fast, &modules, nullptr);
  FrameResolver waiting(&slow, &modules, nullptr);
  const uint64_t address = kVdsoStart + offset;
  EXPECT_EQ(retrying.User(fast.Get(100), address, false)->function, "[vdso]");
  for (int i = 0; i < 5; ++i) retrying.User(fast.Get(101), address, false);  // every try spent
  EXPECT_EQ(waiting.User(slow.Get(100), address, false)->function, "[vdso]");
  AddProcess(100, own_);
  AddProcess(101, own_);
  EXPECT_EQ(retrying.User(fast.Get(100), address, false)->function, "__vdso_time");
  EXPECT_EQ(retrying.User(fast.Get(101), address, false)->function, "[vdso]");
  EXPECT_EQ(waiting.User(slow.Get(100), address, false)->function, "[vdso]");  // not yet
  EXPECT_EQ(retrying.failures().vdso_unreadable, 2u);  // once per process, not per try
}

TEST(FramesToThreadStartTest, CutsAfterTheFirstFrameNothingCalls) {
  Frame leaf{.kind = FrameKind::kGo, .function = "main.work"};
  Frame main_fn{.kind = FrameKind::kGo, .function = "runtime.main"};
  Frame goexit{.kind = FrameKind::kGo, .function = "runtime.goexit", .thread_start = true};
  Frame garbage{.function = "app+0x1234"};
  const std::vector<const Frame*> walked = {&leaf, &main_fn, &goexit, &garbage, &garbage};
  EXPECT_EQ(FramesToThreadStart(walked), 3u);
  const std::vector<const Frame*> whole = {&leaf, &main_fn, &goexit};
  EXPECT_EQ(FramesToThreadStart(whole), 3u);
  const std::vector<const Frame*> native = {&leaf, &main_fn, &garbage};
  EXPECT_EQ(FramesToThreadStart(native), std::nullopt);
  EXPECT_EQ(FramesToThreadStart({}), std::nullopt);
}

}  // namespace
}  // namespace ember
