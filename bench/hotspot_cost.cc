// build/hotspot_cost JAVA_PID NATIVE_PID [ROUNDS [REPEATS]]: what a Java sample costs the agent
// against a native one, in one run. Each round stops every thread of one process and then of the
// other (ptrace, tests/support/thread_capture.h: registers and a 16 KiB stack copy, as the BPF
// snapshot takes them), turns the busiest thread's capture into a sample record as the BPF
// program writes it when its own walk stopped at once (registers + snapshot, no walked frames:
// what a Java sample whose leaf is in the code cache carries), and times StackBuilder::Build on it
// while the threads still stand still: the first Build of the new sample ("new"), then REPEATS
// more of the same sample ("warm": every cache holds its entries). The two processes alternate,
// so the host's drift falls on both. The first Build of each process, with every cache empty
// (libjvm's tables, the code cache, the CFI of its files), is printed apart.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "process/process_table.h"
#include "runtimes/hotspot/hotspot_runtime.h"
#include "sampler/sample_record_layout.h"
#include "stacks/frame_resolver.h"
#include "stacks/stack_builder.h"
#include "status/metrics_registry.h"
#include "support/thread_capture.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {
namespace {

constexpr size_t kSnapshotBytes = 16384;

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// The CPU ticks (utime + stime) of each thread of `pid`.
std::vector<std::pair<pid_t, uint64_t>> ThreadTicks(pid_t pid) {
  std::vector<std::pair<pid_t, uint64_t>> ticks;
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr) return ticks;
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream stat(absl::StrCat(dir, "/", entry->d_name, "/stat"));
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    // Fields from the state (3rd) on: utime is the 14th, stime the 15th.
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
      if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
    }
    ticks.emplace_back(static_cast<pid_t>(std::atoi(entry->d_name)), utime + stime);
  }
  closedir(tasks);
  return ticks;
}

// The thread of `pid` that used the most CPU over a second: the one a profiler samples.
pid_t BusiestThread(pid_t pid) {
  const auto before = ThreadTicks(pid);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto after = ThreadTicks(pid);
  pid_t busiest = 0;
  uint64_t most = 0;
  for (const auto& [tid, ticks] : after) {
    uint64_t used = ticks;
    for (const auto& [old_tid, old_ticks] : before) {
      if (old_tid == tid) used = ticks - old_ticks;
    }
    if (busiest == 0 || used > most) {
      busiest = tid;
      most = used;
    }
  }
  return busiest;
}

// A ring-buffer record as bpf/profiler.bpf.c writes it when its walk stopped at the first frame:
// the registers and the stack snapshot, no walked frames.
class Record {
 public:
  explicit Record(uint32_t pid, const testing::CapturedThread& thread) {
    const size_t size = PythonFramesOffset(0, thread.stack.size());
    storage_.assign((size + 7) / 8, 0);
    auto* bytes = reinterpret_cast<uint8_t*>(storage_.data());
    ember_sample header{};
    header.version = EMBER_RECORD_VERSION;
    header.kind = EMBER_RECORD_SAMPLE;
    header.flags = EMBER_SAMPLE_USER_REGS | (thread.clamped ? EMBER_SAMPLE_SNAPSHOT_CLAMPED : 0);
    header.pid = pid;
    header.tid = static_cast<uint32_t>(thread.tid);
    header.user_snapshot_bytes = static_cast<uint32_t>(thread.stack.size());
    std::memcpy(header.comm, thread.comm.data(), std::min(thread.comm.size(), size_t{15}));
    std::memcpy(header.user_regs, thread.regs.data(), sizeof(header.user_regs));
    std::memcpy(bytes, &header, sizeof(header));
    std::memcpy(bytes + sizeof(header), thread.stack.data(), thread.stack.size());
    ok_ = DecodeSample(bytes, size, &view_) == DecodeResult::kOk;
  }
  bool ok() const { return ok_; }
  const SampleView& view() const { return view_; }

 private:
  std::vector<uint64_t> storage_;
  SampleView view_;
  bool ok_ = false;
};

// The agent's stack-building stages, as src/agent/agent.cc wires them, with HotSpot's runtime.
struct Stages {
  Stages() {
    auto runtime = std::make_unique<hotspot::HotSpotRuntime>(metrics);
    hotspot = runtime.get();
    builder.runtimes().Add(std::move(runtime));
    processes.Subscribe(&builder.runtimes());
  }
  ProcessTable processes;
  ModuleCache modules;
  FrameResolver frames{&processes, &modules, nullptr};
  DwarfUnwinder unwinder;
  MetricsRegistry metrics;
  StackBuilder builder{&frames, &processes, &unwinder, metrics};
  hotspot::HotSpotRuntime* hotspot = nullptr;
};

struct Series {
  const char* name;
  pid_t pid = 0;
  pid_t tid = 0;
  std::vector<double> first_us = {};    // the first Build of each new sample
  std::vector<double> warm_us = {};     // the median of the repeats of each sample
  std::vector<double> frames = {};      // frames per sample
  std::vector<double> jvm_frames = {};  // of which named as Java (FrameKind::kJvm)
  std::vector<double> snapshot_bytes = {};
  size_t complete = 0;  // first Builds whose user stack reached the thread's first frame
  double cold_us = 0;   // the very first Build, every cache empty
  size_t failures = 0;
};

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

// One capture of `series`'s process, its busiest thread's sample built 1 + repeats times.
void Round(Stages& stages, Series& series, int repeats, bool first) {
  absl::StatusOr<testing::ThreadCapture> capture = testing::CaptureThreads(
      series.pid, kSnapshotBytes,
      [&](const testing::ThreadCapture& stopped) -> absl::Status {
        const testing::CapturedThread* thread = stopped.Find(series.tid);
        if (thread == nullptr || thread->stack.empty()) {
          return absl::NotFoundError(absl::StrCat("thread ", series.tid, " not captured"));
        }
        Record record(static_cast<uint32_t>(series.pid), *thread);
        if (!record.ok()) return absl::InternalError("record did not decode");
        // As the agent's KnownProcesses does before a sample is built (not timed: the same for
        // both, and nothing once the process is known).
        Process* process = stages.processes.Get(static_cast<uint32_t>(series.pid));
        if (process != nullptr) stages.processes.Publish(process);
        const uint64_t complete_before = stages.builder.ends().complete;
        Clock::time_point start = Clock::now();
        const std::vector<const Frame*>& stack = stages.builder.Build(record.view(), process);
        const double first_us = MicrosSince(start);
        series.complete += stages.builder.ends().complete - complete_before;
        size_t jvm = 0;
        for (const Frame* frame : stack) jvm += frame->kind == FrameKind::kJvm ? 1 : 0;
        if (first) {
          series.cold_us = first_us;
        } else {
          series.first_us.push_back(first_us);
        }
        series.frames.push_back(static_cast<double>(stack.size()));
        series.snapshot_bytes.push_back(static_cast<double>(thread->stack.size()));
        series.jvm_frames.push_back(static_cast<double>(jvm));
        std::vector<double> warm;
        for (int i = 0; i < repeats; ++i) {
          start = Clock::now();
          stages.builder.Build(record.view(), process);
          warm.push_back(MicrosSince(start));
        }
        series.warm_us.push_back(Median(warm));
        return absl::OkStatus();
      },
      testing::CaptureOptions{});
  if (!capture.ok()) {
    ++series.failures;
    if (series.failures == 1) std::fprintf(stderr, "%s\n", capture.status().ToString().c_str());
  }
}

int Run(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: hotspot_cost JAVA_PID NATIVE_PID [ROUNDS [REPEATS]]\n");
    return 2;
  }
  Series java{.name = "java", .pid = std::atoi(argv[1])};
  Series native{.name = "native", .pid = std::atoi(argv[2])};
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 200;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 20;
  if (java.pid <= 0 || native.pid <= 0 || rounds <= 0 || repeats <= 0) {
    std::fprintf(stderr, "hotspot_cost: pids, rounds and repeats must be positive numbers\n");
    return 2;
  }
  for (Series* series : {&java, &native}) {
    if (kill(series->pid, 0) != 0) {
      std::fprintf(stderr, "hotspot_cost: no process %d\n", series->pid);
      return 1;
    }
    series->tid = BusiestThread(series->pid);
  }
  Stages stages;
  for (int round = 0; round <= rounds; ++round) {
    // Alternate which goes first, so neither always follows the other's cache traffic.
    Series* order[2] = {&java, &native};
    if (round % 2 == 1) std::swap(order[0], order[1]);
    for (Series* series : order) Round(stages, *series, repeats, round == 0);
  }
  std::printf("%d rounds, %d repeats; snapshot %zu bytes; JVM detected: %s\n", rounds, repeats,
              kSnapshotBytes, stages.hotspot->OutcomeOf(java.pid).has_value() ? "yes" : "no");
  std::printf("%-7s %6s %9s %9s %9s %9s %9s %9s %8s %9s %8s\n", "process", "tid", "cold_us",
              "new_med", "new_mean", "warm_med", "frames", "jvm", "whole", "stack_B", "failed");
  for (const Series* s : {&java, &native}) {
    std::printf("%-7s %6d %9.1f %9.2f %9.2f %9.2f %9.1f %9.1f %7.0f%% %9.0f %8zu\n", s->name,
                s->tid, s->cold_us, Median(s->first_us), Mean(s->first_us), Median(s->warm_us),
                Mean(s->frames), Mean(s->jvm_frames),
                s->frames.empty() ? 0.0 : 100.0 * s->complete / s->frames.size(),
                Mean(s->snapshot_bytes), s->failures);
  }
  const double native_new = Median(native.first_us), native_warm = Median(native.warm_us);
  std::printf("java/native: new %.2f, warm %.2f; HotSpot frames cached: %zu\n",
              native_new > 0 ? Median(java.first_us) / native_new : 0,
              native_warm > 0 ? Median(java.warm_us) / native_warm : 0,
              stages.hotspot->cached_frames());
  return 0;
}

}  // namespace
}  // namespace ember

int main(int argc, char** argv) { return ember::Run(argc, argv); }
