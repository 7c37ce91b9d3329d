// The perf-map runtime over fixture /proc trees: finding, sharing and bounding perf maps and
// jitdumps, naming code in no file through the runtime interface, and following the process
// table's events through the RuntimeSet it subscribes.
#include "runtimes/perf_map/perf_map_runtime.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "status/exposition_checker.h"
#include "support/jitdump_image.h"

namespace ember {
namespace {

const std::string kProcRoot = std::string(EMBER_TEST_DATA_DIR) + "/proc";

// Perf maps read at every call: the rate limit has tests of its own.
PerfMapRuntimeLimits Limits() {
  PerfMapRuntimeLimits limits;
  limits.min_refresh = std::chrono::milliseconds(0);
  return limits;
}

// A perf-map runtime in a RuntimeSet subscribed to the table, as the agent has it.
struct Jit {
  explicit Jit(ProcessTable& table, PerfMapRuntimeLimits limits = Limits()) {
    auto owned = std::make_unique<PerfMapRuntime>(table, registry, limits);
    runtime = owned.get();
    runtimes.Add(std::move(owned));
    table.Subscribe(&runtimes);
  }
  PerfMapRuntime* operator->() { return runtime; }
  // What the runtime knows of the process's JIT code (which it must have looked for).
  const JitNames& Of(const Process* process) {
    const JitNames* names = runtime->Find(process->pid);
    EXPECT_NE(names, nullptr) << process->pid;
    static const JitNames kNone;
    return names != nullptr ? *names : kNone;
  }

  MetricsRegistry registry;
  RuntimeSet runtimes;
  PerfMapRuntime* runtime = nullptr;
};

std::string MakeProcTree(const std::string& name, int count) {
  std::string root = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(root);
  for (int pid = 100; pid < 100 + count; ++pid) {
    const std::string dir = root + "/" + std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/stat") << pid << " (p" << pid
                                 << ") S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << pid * 10
                                 << " 0 0\n";
    std::ofstream(dir + "/comm") << "p" << pid << "\n";
    std::filesystem::copy_file(kProcRoot + "/4242/maps", dir + "/maps");
  }
  return root;
}

void WriteText(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::trunc) << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(PerfMapRuntimeTest, PerfMapBytesAreBoundedPerProcessAndCounted) {
  const std::string root = MakeProcTree("ember-proc-perf-map-test", 2);
  PerfMapRuntimeLimits limits = Limits();
  limits.per_process.max_bytes = 16 * 1024;
  ProcessTable table(root, std::chrono::hours(1));
  Jit jit(table, limits);
  for (int pid : {100, 101}) {
    std::filesystem::create_directories(absl::StrCat(root, "/", pid, "/root/tmp"));
    std::ofstream map(absl::StrCat(root, "/", pid, "/root/tmp/perf-", pid, ".map"));
    for (int i = 0; i < 2000; ++i) map << absl::StrFormat("%x 10 jitted_function_%d\n", i * 16, i);
  }
  Process* first = table.Get(100);
  Process* second = table.Get(101);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(jit->Refresh(*first));
  ASSERT_TRUE(jit->Refresh(*second));
  const PerfMap& map = jit.Of(first).perf_map->map();
  EXPECT_LE(map.EstimatedBytes(), limits.per_process.max_bytes);
  EXPECT_EQ(jit->HeldBytes(),
            map.EstimatedBytes() + jit.Of(second).perf_map->map().EstimatedBytes());
  EXPECT_EQ(jit->stats().entries_evicted,
            map.stats().evicted + jit.Of(second).perf_map->map().stats().evicted);
  EXPECT_GT(jit->stats().entries_evicted, 2000u);
  EXPECT_EQ(map.Lookup(1999 * 16)->name, "jitted_function_1999");  // the newest stay named

  // A process that goes takes its perf map's bytes with it.
  const size_t second_bytes = jit.Of(second).perf_map->map().EstimatedBytes();
  std::filesystem::remove_all(root + "/100");
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(jit->HeldBytes(), second_bytes);
  std::filesystem::remove_all(root);
}

void WritePerfMap(const std::string& root, int pid, int entries) {
  std::filesystem::create_directories(absl::StrCat(root, "/", pid, "/root/tmp"));
  std::ofstream map(absl::StrCat(root, "/", pid, "/root/tmp/perf-", pid, ".map"));
  for (int i = 0; i < entries; ++i) map << absl::StrFormat("%x 10 jitted_function_%d\n", i * 16, i);
}

TEST(PerfMapRuntimeTest, PerfMapsTogetherStayWithinTheTotalBudgetLargestFirst) {
  const std::string root = MakeProcTree("ember-proc-perf-map-total-test", 3);
  WritePerfMap(root, 100, 4000);
  WritePerfMap(root, 101, 500);
  WritePerfMap(root, 102, 100);
  PerfMapRuntimeLimits limits = Limits();
  limits.max_total_bytes = 150 * 1024;
  ProcessTable table(root, std::chrono::hours(1));
  Jit jit(table, limits);
  Process* big = table.Get(100);
  Process* middle = table.Get(101);
  Process* small = table.Get(102);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(middle, nullptr);
  ASSERT_NE(small, nullptr);
  ASSERT_TRUE(jit->Refresh(*middle));
  ASSERT_TRUE(jit->Refresh(*small));
  EXPECT_EQ(jit->stats().budget_evictions, 0u);
  ASSERT_TRUE(jit->Refresh(*big));  // 4000 entries: over the total

  const PerfMap& big_map = jit.Of(big).perf_map->map();
  EXPECT_LE(jit->HeldBytes(), limits.max_total_bytes);
  EXPECT_EQ(jit->HeldBytes(), big_map.EstimatedBytes() +
                                  jit.Of(middle).perf_map->map().EstimatedBytes() +
                                  jit.Of(small).perf_map->map().EstimatedBytes());
  // The largest map lost its oldest halves (twice: 4000 -> 2000 -> 1000), the others nothing.
  EXPECT_EQ(jit->stats().budget_evictions, 2u);
  EXPECT_EQ(big_map.size(), 1000u);
  EXPECT_EQ(jit.Of(middle).perf_map->map().size(), 500u);
  EXPECT_EQ(jit.Of(small).perf_map->map().size(), 100u);
  EXPECT_EQ(jit->stats().entries_evicted, 3000u);
  EXPECT_EQ(big_map.Lookup(3999 * 16)->name, "jitted_function_3999");  // the newest stay named
  EXPECT_FALSE(big_map.Lookup(0).has_value());
  EXPECT_EQ(jit.Of(middle).perf_map->map().Lookup(0)->name, "jitted_function_0");
  std::filesystem::remove_all(root);
}

// A jitdump's names count in the perf map budgets as a perf map's do: the largest is shed first,
// whichever kind it is, and a process that goes takes its jitdump's bytes with it.
TEST(PerfMapRuntimeTest, JitdumpsShareThePerfMapBudgets) {
  const std::string root = MakeProcTree("ember-proc-jitdump-total-test", 3);
  WritePerfMap(root, 101, 500);
  for (int pid : {100, 102}) {
    testing::JitDumpImage image;
    for (int i = 0; i < (pid == 100 ? 4000 : 100); ++i) {
      image.CodeLoad(0x10000 + i * 16, 16, absl::StrFormat("jitted_function_%d", i));
    }
    std::filesystem::create_directories(absl::StrCat(root, "/", pid, "/root/tmp"));
    std::ofstream(absl::StrCat(root, "/", pid, "/root/tmp/jit-", pid, ".dump"), std::ios::binary)
        << image.bytes();
  }
  PerfMapRuntimeLimits limits = Limits();
  limits.max_total_bytes = 150 * 1024;
  ProcessTable table(root, std::chrono::hours(1));
  Jit jit(table, limits);
  Process* big = table.Get(100);
  Process* middle = table.Get(101);
  Process* small = table.Get(102);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(middle, nullptr);
  ASSERT_NE(small, nullptr);
  ASSERT_TRUE(jit->Refresh(*middle));
  ASSERT_TRUE(jit->Refresh(*small));
  ASSERT_NE(jit.Of(small).jitdump, nullptr);
  EXPECT_EQ(jit.Of(middle).jitdump, nullptr);  // none to find
  EXPECT_EQ(jit->stats().budget_evictions, 0u);
  ASSERT_TRUE(jit->Refresh(*big));  // 4000 entries: over the total

  const JitDump& big_dump = jit.Of(big).jitdump->dump();
  EXPECT_LE(jit->HeldBytes(), limits.max_total_bytes);
  EXPECT_EQ(jit->HeldBytes(), big_dump.EstimatedBytes() +
                                  jit.Of(big).perf_map->map().EstimatedBytes() +
                                  jit.Of(middle).perf_map->map().EstimatedBytes() +
                                  jit.Of(small).jitdump->dump().EstimatedBytes() +
                                  jit.Of(small).perf_map->map().EstimatedBytes());
  EXPECT_EQ(jit->stats().budget_evictions, 2u);
  EXPECT_EQ(big_dump.names().size(), 1000u);
  EXPECT_EQ(jit.Of(middle).perf_map->map().size(), 500u);
  EXPECT_EQ(jit.Of(small).jitdump->dump().names().size(), 100u);
  EXPECT_EQ(big_dump.names().Lookup(0x10000 + 3999 * 16)->name, "jitted_function_3999");

  const size_t rest = jit->HeldBytes() - big_dump.EstimatedBytes();
  std::filesystem::remove_all(root + "/100");
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(jit->HeldBytes(), rest);
  std::filesystem::remove_all(root);
}

TEST(PerfMapRuntimeTest, ProcessesWhoseMapIsOneFileShareItAndItsBytes) {
  const std::string root = MakeProcTree("ember-proc-perf-map-shared-test", 3);
  WritePerfMap(root, 100, 1000);
  std::filesystem::create_directories(root + "/101/root/tmp");
  std::filesystem::create_hard_link(root + "/100/root/tmp/perf-100.map",
                                    root + "/101/root/tmp/perf-101.map");
  WritePerfMap(root, 102, 1000);  // the same text, another file
  ProcessTable table(root, std::chrono::hours(1));
  Jit jit(table);
  Process* first = table.Get(100);
  Process* second = table.Get(101);
  Process* other = table.Get(102);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(jit->Refresh(*first));
  const size_t one = jit->HeldBytes();
  ASSERT_GT(one, 1000u * PerfMap::kEntryBytes);
  jit->Refresh(*second);
  EXPECT_EQ(jit.Of(second).perf_map, jit.Of(first).perf_map);
  EXPECT_EQ(jit->HeldBytes(), one);  // held once
  EXPECT_EQ(jit.Of(second).perf_map->map().Lookup(999 * 16)->name, "jitted_function_999");
  ASSERT_TRUE(jit->Refresh(*other));
  EXPECT_NE(jit.Of(other).perf_map, jit.Of(first).perf_map);
  EXPECT_EQ(jit->HeldBytes(), 2 * one);

  // What the file gains is read once, for both.
  {
    std::ofstream map(root + "/100/root/tmp/perf-100.map", std::ios::app);
    map << "ffff0 10 appended\n";
  }
  ASSERT_TRUE(jit->Refresh(*second));
  EXPECT_EQ(jit.Of(first).perf_map->map().Lookup(0xffff0)->name, "appended");
  EXPECT_FALSE(jit->Refresh(*first));  // nothing new

  // The map's bytes stay while any of its processes does.
  std::filesystem::remove_all(root + "/100");
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(jit->HeldBytes(), 2 * one + PerfMap::kEntryBytes + 8);  // + "appended"
  EXPECT_EQ(jit.Of(second).perf_map->map().Lookup(0xffff0)->name, "appended");
  {  // its first process gone, the map is read through another's path
    std::ofstream map(root + "/101/root/tmp/perf-101.map", std::ios::app);
    map << "fffff0 10 appended_later\n";
  }
  ASSERT_TRUE(jit->Refresh(*second));
  EXPECT_EQ(jit.Of(second).perf_map->map().Lookup(0xfffff0)->name, "appended_later");
  std::filesystem::remove_all(root + "/101");
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(jit->HeldBytes(), jit.Of(other).perf_map->map().EstimatedBytes());
  std::filesystem::remove_all(root);
}

// A process whose perf map turns out to be another process's file (or its own again) swaps only
// the map: its jitdump, a separate file, stays as read, not read again from its first byte.
TEST(PerfMapRuntimeTest, SwappingToASharedPerfMapKeepsTheJitdump) {
  const std::string root = MakeProcTree("ember-proc-perf-map-swap-test", 2);
  WritePerfMap(root, 100, 10);
  WritePerfMap(root, 101, 20);
  testing::JitDumpImage image;
  for (int i = 0; i < 50; ++i) {
    image.CodeLoad(0x10000 + i * 16, 16, absl::StrFormat("dumped_function_%d", i));
  }
  const std::string dump_path = root + "/101/root/tmp/jit-101.dump";
  std::ofstream(dump_path, std::ios::binary) << image.bytes();
  ProcessTable table(root, std::chrono::hours(1));
  Jit jit(table);
  Process* first = table.Get(100);
  Process* second = table.Get(101);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(jit->Refresh(*first));
  ASSERT_TRUE(jit->Refresh(*second));
  ASSERT_NE(jit.Of(second).jitdump, nullptr);
  const JitDumpFile* dump = jit.Of(second).jitdump.get();
  ASSERT_EQ(dump->dump().names().size(), 50u);

  // Its map is now a hard link to the first's file, and its jitdump is gone from its /tmp (the
  // names read stay): a jitdump read again from scratch would find nothing.
  std::filesystem::remove(root + "/101/root/tmp/perf-101.map");
  std::filesystem::create_hard_link(root + "/100/root/tmp/perf-100.map",
                                    root + "/101/root/tmp/perf-101.map");
  std::filesystem::remove(dump_path);
  jit->Refresh(*second);
  EXPECT_EQ(jit.Of(second).perf_map, jit.Of(first).perf_map);
  EXPECT_EQ(jit.Of(second).jitdump.get(), dump);
  ASSERT_NE(jit.Of(second).jitdump, nullptr);
  EXPECT_EQ(jit.Of(second).jitdump->dump().names().Lookup(0x10000 + 49 * 16)->name,
            "dumped_function_49");
  EXPECT_EQ(jit->HeldBytes(),
            jit.Of(first).perf_map->map().EstimatedBytes() + dump->dump().EstimatedBytes());

  // An exec drops it: the new program's runtime writes another.
  std::filesystem::create_symlink("/usr/bin/new-program", root + "/101/exe");
  ASSERT_TRUE(table.ReloadMaps(second));
  table.Publish(second);
  EXPECT_EQ(jit->Find(101), nullptr);
  EXPECT_EQ(jit->HeldBytes(), jit.Of(first).perf_map->map().EstimatedBytes());
  std::filesystem::remove_all(root);
}

// Eviction is not an exit: the names stay. A process that exec'd while it was out of the table
// is read again as new (its exec count starts again), and its names are the old program's.
TEST(PerfMapRuntimeTest, AProcessThatExecdWhileEvictedHasItsNamesDropped) {
  const std::string root = MakeProcTree("ember-proc-perf-map-evicted-exec-test", 2);
  WritePerfMap(root, 100, 10);
  std::filesystem::create_symlink("/usr/bin/old-program", root + "/100/exe");
  ProcessTable table(root, std::chrono::hours(1), ProcessTableLimits{.max_processes = 1});
  Jit jit(table);
  Process* first = table.Get(100);
  ASSERT_NE(first, nullptr);
  table.Publish(first);
  ASSERT_TRUE(jit->Refresh(*first));
  ASSERT_NE(jit.Of(first).perf_map, nullptr);
  Process* second = table.Get(101);
  ASSERT_NE(second, nullptr);
  table.Publish(second);
  ASSERT_TRUE(table.WasEvicted(100));
  EXPECT_NE(jit->Find(100), nullptr);

  first = table.Get(100);  // read again unchanged: the names stay
  ASSERT_NE(first, nullptr);
  table.Publish(first);
  EXPECT_NE(jit->Find(100), nullptr);
  ASSERT_NE(table.Get(101), nullptr);
  ASSERT_TRUE(table.WasEvicted(100));

  std::filesystem::remove(root + "/100/exe");
  std::filesystem::create_symlink("/usr/bin/new-program", root + "/100/exe");
  first = table.Get(100);
  ASSERT_NE(first, nullptr);
  table.Publish(first);
  EXPECT_EQ(jit->Find(100), nullptr);
  std::filesystem::remove_all(root);
}

// Hostile host (issue 8): a process whose main thread exited while another thread runs on: its
// JIT code's perf map is in the live thread's root.
TEST(PerfMapRuntimeTest, LeaderThatExitedHasItsPerfMapReadThroughALiveThread) {
  std::string root = std::filesystem::temp_directory_path() / "ember-perf-map-leader-test";
  std::filesystem::remove_all(root);
  std::filesystem::copy(
      kProcRoot, root,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  const std::string pid_dir = root + "/4243";
  WriteText(pid_dir + "/stat", ReadText(root + "/4242/stat"));
  WriteText(pid_dir + "/comm", "phases\n");
  WriteText(pid_dir + "/maps", "");
  WriteText(pid_dir + "/task/4243/maps", "");  // the zombie leader
  WriteText(pid_dir + "/task/4244/maps", ReadText(root + "/4242/maps"));
  std::filesystem::create_symlink("/usr/bin/phases", pid_dir + "/task/4244/exe");
  ProcessTable table(root);
  Jit jit(table);
  Process* process = table.Get(4243);
  ASSERT_NE(process, nullptr);
  WriteText(pid_dir + "/task/4244/root/tmp/perf-4243.map", "7f0000001000 100 jitted_function\n");
  EXPECT_TRUE(jit->Refresh(*process));
  ASSERT_NE(jit.Of(process).perf_map, nullptr);
  EXPECT_EQ(jit.Of(process).perf_map->map().size(), 1u);
  std::filesystem::remove_all(root);
}

TEST(JitKindTest, RuntimeFromExecutableOrLibrary) {
  Process process;
  process.executable_path = "/usr/bin/node";
  EXPECT_EQ(JitKindOf(process), FrameKind::kV8Js);
  process.executable_path = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java";
  EXPECT_EQ(JitKindOf(process), FrameKind::kJvm);
  process.executable_path = "/usr/share/dotnet/dotnet";
  EXPECT_EQ(JitKindOf(process), FrameKind::kDotnet);
  process.executable_path = "/opt/app/server";
  EXPECT_EQ(JitKindOf(process), FrameKind::kJit);
  MemoryMapping libjvm;
  libjvm.path = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
  process.mappings.push_back(libjvm);
  EXPECT_EQ(JitKindOf(process), FrameKind::kJvm);  // an embedded JVM
  process.mappings[0].path = "/usr/share/dotnet/shared/Microsoft.NETCore.App/8.0.0/libcoreclr.so";
  EXPECT_EQ(JitKindOf(process), FrameKind::kDotnet);
  process.executable_path = "";
  process.mappings.clear();
  EXPECT_EQ(JitKindOf(process), FrameKind::kJit);
}

// A stand-in for the resolver's cache: frames by (version, address), with the calls counted.
class FakeFrameCache final : public CodeFrameCache {
 public:
  const Frame* Find(uint64_t version, ProcessAddress address) override {
    ++finds;
    auto it = frames.find({version, address.value});
    return it == frames.end() ? nullptr : it->second.get();
  }
  const Frame* Add(uint64_t version, ProcessAddress address, Frame frame) override {
    ++adds;
    auto& slot = frames[{version, address.value}];
    slot = std::make_unique<Frame>(std::move(frame));
    return slot.get();
  }

  std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<Frame>> frames;
  int finds = 0;
  int adds = 0;
};

// The hook names code in no file from the perf map, files the frame under the map's version, and
// finds it there the next time; a rewritten map has another version, so its frames are named
// anew. The set asks its runtimes in order and takes the first frame.
TEST(PerfMapRuntimeTest, NamesCodeInNoFileThroughTheCacheUnderTheMapsVersion) {
  const std::string root = MakeProcTree("ember-perf-map-hook-test", 1);
  std::filesystem::create_symlink("/usr/bin/node", root + "/100/exe");
  WriteText(root + "/100/root/tmp/perf-100.map", "7f0000000100 80 JS:*hot /srv/app.js:3:1\n");
  ProcessTable table(root, std::chrono::hours(1));
  Jit jit(table);
  Process* process = table.Get(100);
  ASSERT_NE(process, nullptr);
  FakeFrameCache cache;

  const Frame* frame =
      jit.runtimes.NameCodeOutsideFiles(*process, ProcessAddress{0x7f0000000110}, cache);
  ASSERT_NE(frame, nullptr);
  EXPECT_EQ(frame->function, "JS:*hot /srv/app.js:3:1");
  EXPECT_EQ(frame->kind, FrameKind::kV8Js);
  EXPECT_EQ(frame->module, "/tmp/perf-100.map");
  EXPECT_EQ(frame->address, 0x7f0000000110u);
  ASSERT_EQ(cache.adds, 1);
  const uint64_t version = cache.frames.begin()->first.first;
  EXPECT_EQ(version, jit.Of(process).perf_map->map().version());
  EXPECT_NE(version, 0u);  // 0 files the resolver's own frames
  EXPECT_EQ(jit->stats().frames_named, 1u);

  // Found in the cache: not named again.
  EXPECT_EQ(jit.runtimes.NameCodeOutsideFiles(*process, ProcessAddress{0x7f0000000110}, cache),
            frame);
  EXPECT_EQ(cache.adds, 1);
  EXPECT_EQ(jit->stats().frames_named, 1u);

  // Rewritten in place: the next miss reads it, and its frames are filed under a new version.
  WriteText(root + "/100/root/tmp/perf-100.map", "7f0000000100 80 JS:*rewritten\n");
  EXPECT_EQ(jit.runtimes.NameCodeOutsideFiles(*process, ProcessAddress{0x7f0000000190}, cache),
            nullptr);
  EXPECT_NE(jit.Of(process).perf_map->map().version(), version);
  const Frame* renamed =
      jit.runtimes.NameCodeOutsideFiles(*process, ProcessAddress{0x7f0000000110}, cache);
  ASSERT_NE(renamed, nullptr);
  EXPECT_EQ(renamed->function, "JS:*rewritten");
  EXPECT_EQ(cache.adds, 2);

  // A runtime without the hook names nothing; the set goes on to the next.
  class Silent final : public Runtime {
   public:
    void ProcessMapsChanged(const Process&) override {}
    void ProcessExited(uint32_t) override {}
    void Splice(const Process&, const SampleView&, UserFrames) override {}
    void NextGeneration() override {}
    void SyncMetrics() override {}
    void LogSummary(const BpfStats&) const override {}
  };
  RuntimeSet set;
  set.Add(std::make_unique<Silent>());
  FakeFrameCache empty;
  EXPECT_EQ(set.NameCodeOutsideFiles(*process, ProcessAddress{0x7f0000000110}, empty), nullptr);
  EXPECT_EQ(empty.finds, 0);
  EXPECT_EQ(set.HeldBytes(), 0u);
  EXPECT_EQ(jit.runtimes.HeldBytes(), jit->HeldBytes());
  std::filesystem::remove_all(root);
}

// A runtime that records the events the set hands it.
class RecordingRuntime final : public Runtime {
 public:
  explicit RecordingRuntime(std::vector<std::string>* events) : events_(events) {}
  void ProcessMapsChanged(const Process& process) override {
    events_->push_back(absl::StrCat("maps ", process.pid));
  }
  void ProcessExited(uint32_t pid) override { events_->push_back(absl::StrCat("exited ", pid)); }
  void Splice(const Process&, const SampleView&, UserFrames) override {}
  void NextGeneration() override {}
  void SyncMetrics() override {}
  void LogSummary(const BpfStats&) const override {}

 private:
  std::vector<std::string>* events_;
};

// The set subscribes to the table itself: a publication reaches every runtime, and so does an
// exit, which drops the perf map and the jitdump the runtime held of the process.
TEST(RuntimeSetTest, SubscribedToTheTableItTellsEveryRuntimeOfItsEvents) {
  const std::string root = MakeProcTree("ember-runtime-set-events-test", 2);
  WriteText(root + "/100/root/tmp/perf-100.map", "7f0000000100 80 jitted\n");
  testing::JitDumpImage image;
  image.CodeLoad(0x10000, 16, "dumped");
  std::ofstream(root + "/100/root/tmp/jit-100.dump", std::ios::binary) << image.bytes();
  ProcessTable table(root, std::chrono::hours(1));
  MetricsRegistry registry;
  RuntimeSet runtimes;
  std::vector<std::string> events;
  runtimes.Add(std::make_unique<RecordingRuntime>(&events));
  auto owned = std::make_unique<PerfMapRuntime>(table, registry, Limits());
  PerfMapRuntime* jit = owned.get();
  runtimes.Add(std::move(owned));
  table.Subscribe(&runtimes);

  Process* first = table.Get(100);
  Process* second = table.Get(101);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  table.Publish(first);
  table.Publish(second);
  EXPECT_EQ(events, (std::vector<std::string>{"maps 100", "maps 101"}));
  ASSERT_TRUE(jit->Refresh(*first));
  ASSERT_NE(jit->Find(100), nullptr);
  ASSERT_NE(jit->Find(100)->jitdump, nullptr);
  EXPECT_GT(jit->HeldBytes(), 0u);

  std::filesystem::remove_all(root + "/100");
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(events, (std::vector<std::string>{"maps 100", "maps 101", "exited 100"}));
  EXPECT_EQ(jit->Find(100), nullptr);
  EXPECT_EQ(jit->HeldBytes(), 0u);
  std::filesystem::remove_all(root);
}

double Sample(const testing::Exposition& exposition, const std::string& series) {
  auto it = exposition.samples.find(series);
  EXPECT_NE(it, exposition.samples.end()) << series;
  return it == exposition.samples.end() ? -1 : it->second;
}

// Its metrics as /metrics renders them: there at zero from the start, then following the maps.
TEST(PerfMapRuntimeTest, MetricsRenderWithPrometheusNamesAndFollowTheMaps) {
  const std::string root = MakeProcTree("ember-perf-map-metrics-test", 1);
  std::filesystem::create_directories(root + "/100/root/tmp");
  {
    std::ofstream map(root + "/100/root/tmp/perf-100.map");
    for (int i = 0; i < 1000; ++i) map << absl::StrFormat("%x 10 jitted_%d\n", 0x10000 + i * 16, i);
  }
  ProcessTable table(root, std::chrono::hours(1));
  PerfMapRuntimeLimits limits = Limits();
  limits.per_process.max_bytes = 8192;
  Jit jit(table, limits);
  jit->SyncMetrics();
  auto empty = testing::ParseExposition(jit.registry.Render());
  ASSERT_TRUE(empty.ok()) << empty.status();
  for (const char* series : {"ember_perf_map_bytes", "ember_perf_map_entries_evicted_total",
                             "ember_perf_map_budget_evictions_total"}) {
    EXPECT_EQ(Sample(*empty, series), 0) << series;
  }
  EXPECT_EQ(empty->types.at("ember_perf_map_bytes"), "gauge");
  EXPECT_EQ(empty->types.at("ember_perf_map_entries_evicted_total"), "counter");
  EXPECT_EQ(empty->types.at("ember_jitdump_refusals_total"), "counter");

  Process* process = table.Get(100);
  ASSERT_NE(process, nullptr);
  ASSERT_TRUE(jit->Refresh(*process));
  jit->SyncMetrics();
  auto after = testing::ParseExposition(jit.registry.Render());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(Sample(*after, "ember_perf_map_entries_evicted_total"), 900);
  EXPECT_EQ(Sample(*after, "ember_perf_map_bytes"), static_cast<double>(jit->HeldBytes()));
  EXPECT_GT(jit->HeldBytes(), 0u);
  // Counters only add what is new at the next publication.
  const double evicted = Sample(*after, "ember_perf_map_entries_evicted_total");
  jit->SyncMetrics();
  auto again = testing::ParseExposition(jit.registry.Render());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Sample(*again, "ember_perf_map_entries_evicted_total"), evicted);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace ember
