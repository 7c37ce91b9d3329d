// The BPF program copies a sampled thread's OpenTelemetry thread-context record where
// FindThreadContextTls says its threads keep it: helpers set a known record on their main thread
// and none on a second one, in each way a thread reaches its TLS (an offset from the thread
// pointer, or its DTV); and a prctl naming a mapping OTEL_CTX comes back as a notice.
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "context/tls_location.h"
#include "gtest/gtest.h"
#include "process/process_table.h"
#include "runtimes/process_memory.h"
#include "sampler/bpf_profiler.h"
#include "support/subprocess.h"

namespace ember {
namespace {

const std::string kHelpers = EMBER_TLS_HELPERS;

// The helpers' record (helper_run.h): its 28-byte header and 16 bytes of attributes.
std::vector<uint8_t> ExpectedRecord() {
  std::vector<uint8_t> bytes = {1,    2,    3,    4,    5,  6,  7,    8,    9,    10,
                                11,   12,   13,   14,   15, 16, 0xa1, 0xa2, 0xa3, 0xa4,
                                0xa5, 0xa6, 0xa7, 0xa8, 1,  1,  16,   0};
  const char attrs[] = "\x00\x09/checkout\x01\x03GET";
  bytes.reserve(bytes.size() + 16);
  for (size_t i = 0; i < 16; ++i) bytes.push_back(static_cast<uint8_t>(attrs[i]));
  return bytes;
}

struct Seen {
  int ok = 0;
  int ok_with_record = 0;  // ok, and the bytes are the helper's record
  int none = 0;
  int no_tls_block = 0;
  int other = 0;
};

struct Case {
  const char* name;
  std::vector<std::string> argv;
  uint8_t kind;  // EMBER_CONTEXT_TLS_*
  const char* tunables = nullptr;
  // What the helper's thread that never touches the variable reads as: NONE in static TLS (its
  // pointer is the initial NULL), NO_TLS_BLOCK in a dlopened module's dynamic TLS.
  uint8_t untouched = EMBER_CONTEXT_NONE;
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.name; }

// Starts a helper spinning for `ms` with its record set; nullopt-like empty pid on failure.
std::unique_ptr<testing::Subprocess> StartHelper(const Case& c, int ms) {
  std::vector<std::string> argv;
  if (c.tunables != nullptr) argv = {"/usr/bin/env", std::string("GLIBC_TUNABLES=") + c.tunables};
  argv.push_back(kHelpers + "/" + c.argv[0]);
  argv.push_back("spin");
  argv.push_back(std::to_string(ms));
  for (size_t i = 1; i < c.argv.size(); ++i) argv.push_back(kHelpers + "/" + c.argv[i]);
  auto helper = std::make_unique<testing::Subprocess>(argv);
  if (!helper->WaitForOutput("ready", std::chrono::seconds(20))) return nullptr;
  return helper;
}

class ThreadContextReadTest : public ::testing::TestWithParam<Case> {};

TEST_P(ThreadContextReadTest, CopiesTheRecordOfTheThreadThatHasOne) {
  const Case& c = GetParam();
  std::unique_ptr<testing::Subprocess> helper = StartHelper(c, 8000);
  ASSERT_NE(helper, nullptr);
  const uint32_t pid = helper->pid();
  ProcessTable table("/proc");
  Process* process = table.Get(pid);
  ASSERT_NE(process, nullptr);
  ProcessMemoryReader memory(pid);
  absl::StatusOr<context::TlsLocation> location = context::FindThreadContextTls(*process, memory);
  ASSERT_TRUE(location.ok()) << location.status();
  EXPECT_EQ(location->config.kind, c.kind);

  const std::vector<uint8_t> expected = ExpectedRecord();
  absl::flat_hash_map<uint32_t, Seen> by_thread;
  int not_read = 0;
  BpfProfilerConfig config{.sampling_hz = 499, .pids = {pid}};
  absl::StatusOr<std::unique_ptr<BpfProfiler>> profiler =
      BpfProfiler::Create(config, [&](const SampleView& sample) {
        if (sample.header->pid != pid) return;
        Seen& seen = by_thread[sample.header->tid];
        switch (sample.header->context_status) {
          case EMBER_CONTEXT_OK:
            ++seen.ok;
            if (std::equal(sample.thread_context.begin(), sample.thread_context.end(),
                           expected.begin(), expected.end())) {
              ++seen.ok_with_record;
            }
            break;
          case EMBER_CONTEXT_NONE:
            ++seen.none;
            break;
          case EMBER_CONTEXT_NO_TLS_BLOCK:
            ++seen.no_tls_block;
            break;
          case EMBER_CONTEXT_NOT_READ:
            ++not_read;
            break;
          default:
            ++seen.other;
        }
      });
  ASSERT_TRUE(profiler.ok()) << profiler.status();
  ASSERT_TRUE((*profiler)->SetThreadContextProcess(pid, location->config).ok());
  // Marked known with the context flag: the program looks the entry up for it.
  (*profiler)->MarkProcessKnown(pid);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end) ASSERT_TRUE((*profiler)->Poll(100).ok());
  (*profiler)->RemoveThreadContextProcess(pid);
  ASSERT_TRUE((*profiler)->Poll(0).ok());

  const size_t untouched_at = helper->output().find("untouched=");
  ASSERT_NE(untouched_at, std::string::npos) << helper->output();
  const uint32_t untouched = std::stoul(helper->output().substr(untouched_at + 10));
  const Seen untouched_thread = by_thread[untouched];
  by_thread.erase(untouched);
  EXPECT_GT(
      c.untouched == EMBER_CONTEXT_NONE ? untouched_thread.none : untouched_thread.no_tls_block, 20)
      << "the thread that never touched the variable";
  EXPECT_EQ(untouched_thread.ok + untouched_thread.other, 0);
  EXPECT_EQ(
      c.untouched == EMBER_CONTEXT_NONE ? untouched_thread.no_tls_block : untouched_thread.none, 0);
  const Seen main_thread = by_thread[pid];
  EXPECT_GT(main_thread.ok, 20) << "the main thread's samples carry its record";
  EXPECT_EQ(main_thread.ok_with_record, main_thread.ok);
  EXPECT_EQ(main_thread.none, 0);
  EXPECT_EQ(main_thread.other, 0);
  int none = 0;
  for (const auto& [tid, seen] : by_thread) {
    if (tid == pid) continue;
    none += seen.none;
    EXPECT_EQ(seen.ok, 0) << "thread " << tid << " has no record";
    EXPECT_EQ(seen.other + seen.no_tls_block, 0);
  }
  EXPECT_GT(none, 20) << "the second thread's samples say it has none";
  const BpfStats stats = (*profiler)->ReadStats();
  EXPECT_EQ(stats.context_ok, static_cast<uint64_t>(main_thread.ok));
  EXPECT_GE(stats.context_none, static_cast<uint64_t>(none + untouched_thread.none));
  EXPECT_EQ(stats.context_no_tls_block, static_cast<uint64_t>(untouched_thread.no_tls_block));
  EXPECT_EQ(stats.context_read_failed + stats.context_invalid, 0u);
  helper->Signal(SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(
    Models, ThreadContextReadTest,
    ::testing::Values(Case{"Executable", {"exe_gcc_bfd"}, EMBER_CONTEXT_TLS_TP_OFFSET},
                      Case{"TlsDescStatic", {"user_tlsdesc_gcc_lld"}, EMBER_CONTEXT_TLS_TP_OFFSET},
                      Case{"GeneralDynamic", {"user_gd_gcc_bfd"}, EMBER_CONTEXT_TLS_DTV},
                      // musl's DTV: one-word entries, its length in the first.
                      Case{"MuslGeneralDynamic", {"user_gd_musl"}, EMBER_CONTEXT_TLS_DTV},
                      Case{"TlsDescDynamic",
                           {"dlopen_user", "libtlsdesc_gcc_bfd.so"},
                           EMBER_CONTEXT_TLS_DTV,
                           "glibc.rtld.optional_static_tls=0",
                           EMBER_CONTEXT_NO_TLS_BLOCK}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// An exec replaces the program, and where its threads keep their context with it: the BPF side
// forgets the entry, even for the same program (whose offsets happen to be the same), until the
// agent resolves the new image.
TEST(ThreadContextReadTest, AnExecForgetsTheEntry) {
  std::unique_ptr<testing::Subprocess> helper =
      StartHelper(Case{"Executable", {"exe_gcc_bfd"}, EMBER_CONTEXT_TLS_TP_OFFSET}, 8000);
  ASSERT_NE(helper, nullptr);
  const uint32_t pid = helper->pid();
  ProcessTable table("/proc");
  Process* process = table.Get(pid);
  ASSERT_NE(process, nullptr);
  ProcessMemoryReader memory(pid);
  absl::StatusOr<context::TlsLocation> location = context::FindThreadContextTls(*process, memory);
  ASSERT_TRUE(location.ok()) << location.status();
  uint64_t exec_seen_ns = UINT64_MAX;
  int ok_before = 0, ok_after = 0, not_read_after = 0;
  BpfProfilerConfig config{.sampling_hz = 499, .pids = {pid}};
  absl::StatusOr<std::unique_ptr<BpfProfiler>> profiler =
      BpfProfiler::Create(config, [&](const SampleView& sample) {
        if (sample.header->pid != pid || sample.header->tid != pid) return;
        const bool after = sample.header->timestamp_ns > exec_seen_ns;
        if (sample.header->context_status == EMBER_CONTEXT_OK) ++(after ? ok_after : ok_before);
        if (after && sample.header->context_status == EMBER_CONTEXT_NOT_READ) ++not_read_after;
      });
  ASSERT_TRUE(profiler.ok()) << profiler.status();
  ASSERT_TRUE((*profiler)->SetThreadContextProcess(pid, location->config).ok());
  (*profiler)->MarkProcessKnown(pid);
  auto poll_for = [&](std::chrono::milliseconds duration) {
    const auto end = std::chrono::steady_clock::now() + duration;
    while (std::chrono::steady_clock::now() < end) ASSERT_TRUE((*profiler)->Poll(50).ok());
  };
  poll_for(std::chrono::milliseconds(1000));
  ASSERT_GT(ok_before, 20);
  ASSERT_TRUE(helper->WriteStdin("exec\n"));
  // The new image prints its own line and "ready" again.
  const auto wait_end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (helper->output().find("ready") == helper->output().rfind("ready") &&
         std::chrono::steady_clock::now() < wait_end) {
    helper->WaitForOutput("never printed", std::chrono::milliseconds(50));
  }
  ASSERT_NE(helper->output().find("ready"), helper->output().rfind("ready")) << helper->output();
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  poll_for(std::chrono::milliseconds(20));  // samples before the mark were taken before it
  exec_seen_ns = static_cast<uint64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  poll_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(ok_after, 0);
  EXPECT_GT(not_read_after, 20);
  helper->Signal(SIGKILL);
}

TEST(ContextNoticeTest, APrctlNamingAMappingOtelCtxIsNoticedOnce) {
  std::unique_ptr<testing::Subprocess> helper =
      StartHelper(Case{"Executable", {"exe_gcc_bfd"}, EMBER_CONTEXT_TLS_TP_OFFSET}, 8000);
  ASSERT_NE(helper, nullptr);
  const uint32_t pid = helper->pid();
  std::vector<uint32_t> notices;
  absl::StatusOr<std::unique_ptr<BpfProfiler>> profiler = BpfProfiler::Create(
      BpfProfilerConfig{.sampling_hz = 19, .pids = {}}, [](const SampleView&) {});
  ASSERT_TRUE(profiler.ok()) << profiler.status();
  ASSERT_TRUE((*profiler)->context_notices_enabled());
  (*profiler)->set_context_notice_callback([&](uint32_t from) { notices.push_back(from); });
  // Two publications more than EMBER_CONTEXT_NOTICE_GAP_NS apart, and a third right after the
  // second, which the gap suppresses.
  for (int round = 1; round <= 3; ++round) {
    if (round == 2) std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    ASSERT_TRUE(helper->WriteStdin("publish\n"));
    ASSERT_TRUE(
        helper->WaitForOutput("published " + std::to_string(round), std::chrono::seconds(10)));
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < end) ASSERT_TRUE((*profiler)->Poll(100).ok());
  // Other processes may name their mappings too (glibc names thread stacks): only the helper's
  // count here, two calls naming OTEL_CTX that were written, none for its other name.
  EXPECT_EQ(std::count(notices.begin(), notices.end(), pid), 2);
  const BpfStats stats = (*profiler)->ReadStats();
  EXPECT_GE(stats.context_notices, 2u);
  EXPECT_GE(stats.context_notices_suppressed, 1u);
  helper->Signal(SIGKILL);
}

// Where tracefs is not mounted and cannot be (no CAP_SYS_ADMIN), the profiler starts all the same,
// with notices off. In a child of its own mount namespace, so the host keeps its tracefs.
TEST(ContextNoticeTest, WithoutTracefsTheProfilerStartsWithNoticesOff) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0) _exit(10);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(11);
    umount2("/sys/kernel/tracing", MNT_DETACH);
    umount2("/sys/kernel/debug", MNT_DETACH);
    if (access("/sys/kernel/tracing/events", F_OK) == 0) _exit(12);
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (syscall(SYS_capget, &header, data) != 0) _exit(13);
    data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective &= ~CAP_TO_MASK(CAP_SYS_ADMIN);
    if (syscall(SYS_capset, &header, data) != 0) _exit(14);
    absl::StatusOr<std::unique_ptr<BpfProfiler>> profiler = BpfProfiler::Create(
        BpfProfilerConfig{.sampling_hz = 19, .pids = {}}, [](const SampleView&) {});
    if (!profiler.ok()) _exit(15);
    _exit((*profiler)->context_notices_enabled() ? 16 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10-14: the test's setup failed; 15: the profiler did not "
                                       "start; 16: notices on without tracefs";
}

}  // namespace
}  // namespace ember
