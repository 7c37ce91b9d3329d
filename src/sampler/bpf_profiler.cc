// Loader for bpf/profiler.bpf.c: libbpf errors become one clear Status here, in one place.
#include "sampler/bpf_profiler.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "phase_times.h"
#include "profiler.skel.h"
#include "sampler/cpu_list.h"
#include "spdlog/spdlog.h"

namespace ember {
namespace {

constexpr char kKernelBtf[] = "/sys/kernel/btf/vmlinux";
constexpr char kTracefs[] = "/sys/kernel/tracing";
constexpr char kTracefsEvents[] = "/sys/kernel/tracing/events";
constexpr char kDebugfsEvents[] = "/sys/kernel/debug/tracing/events";

int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  char line[1024];
  vsnprintf(line, sizeof(line), format, args);
  std::string_view text(line);
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (level == LIBBPF_WARN) {
    spdlog::debug("libbpf: {}", text);  // the caller turns failures into one clear error
  } else {
    spdlog::trace("libbpf: {}", text);
  }
  return 0;
}

absl::Status ErrnoStatus(int err, absl::string_view what) {
  err = err < 0 ? -err : err;
  std::string hint;
  if (err == EPERM || err == EACCES) {
    hint = " (run ember-agent as root, or see docs/capabilities.md)";
  }
  return absl::PermissionDeniedError(absl::StrCat(what, ": ", strerror(err), hint));
}

size_t RingBufferBytes(int cpus, int hz, uint32_t snapshot_bytes) {
  // Room for 2.5 s of samples per CPU, so a slow first symbolization of a big library does not
  // lose samples. A record is at most 2 KiB of stacks plus its snapshot, but a snapshot only
  // holds the stack actually in use, a few KiB for most threads, so a quarter of the limit is
  // budgeted per record. The kernel wants a power of two; user space maps it twice, so its
  // resident size counts double.
  size_t record = 2048 + size_t{snapshot_bytes} / 4;
  size_t want = static_cast<size_t>(cpus) * static_cast<size_t>(hz) * record * 5 / 2;
  size_t bytes = 1 << 20;
  while (bytes < want && bytes < (size_t{64} << 20)) bytes <<= 1;
  return bytes;
}

int OpenCpuClock(int cpu, int hz) {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  // cpu-clock counts nanoseconds, so a fixed period gives exactly `hz` samples per busy second
  // and every sample stands for the same CPU time.
  attr.sample_period = 1'000'000'000ull / hz;
  return static_cast<int>(
      syscall(SYS_perf_event_open, &attr, /*pid=*/-1, cpu, /*group_fd=*/-1, PERF_FLAG_FD_CLOEXEC));
}

// Which member of BpfStats counts each counter of the `stats` map. By enum constant, not by
// position, and checked below to pair every constant and every member exactly once, so that
// reordering either side fails the build instead of swapping two metrics.
struct BpfStatField {
  ember_stat index;
  uint64_t BpfStats::*member;
};

constexpr BpfStatField kBpfStatFields[] = {
    {EMBER_STAT_SAMPLES, &BpfStats::samples},
    {EMBER_STAT_RINGBUF_FULL, &BpfStats::ring_buffer_full},
    {EMBER_STAT_KERNEL_STACK_ERRORS, &BpfStats::kernel_stack_errors},
    {EMBER_STAT_USER_STACK_ERRORS, &BpfStats::user_stack_errors},
    {EMBER_STAT_SNAPSHOT_ERRORS, &BpfStats::snapshot_errors},
    {EMBER_STAT_SNAPSHOT_NO_MAPPING, &BpfStats::snapshot_no_mapping},
    {EMBER_STAT_SNAPSHOT_CLAMPED, &BpfStats::snapshot_clamped},
    {EMBER_STAT_PYTHON_OK, &BpfStats::python_ok},
    {EMBER_STAT_PYTHON_NO_THREAD_STATE, &BpfStats::python_no_thread_state},
    {EMBER_STAT_PYTHON_READ_FAILED, &BpfStats::python_read_failed},
    {EMBER_STAT_PYTHON_NOT_CODE, &BpfStats::python_not_code},
    {EMBER_STAT_PYTHON_TRUNCATED, &BpfStats::python_truncated},
    {EMBER_STAT_UNWIND_COMPLETE, &BpfStats::unwind_complete},
    {EMBER_STAT_UNWIND_STOPPED, &BpfStats::unwind_stopped},
    {EMBER_STAT_UNWIND_NO_TABLES, &BpfStats::unwind_no_tables},
    {EMBER_STAT_CONTEXT_OK, &BpfStats::context_ok},
    {EMBER_STAT_CONTEXT_NONE, &BpfStats::context_none},
    {EMBER_STAT_CONTEXT_INVALID, &BpfStats::context_invalid},
    {EMBER_STAT_CONTEXT_READ_FAILED, &BpfStats::context_read_failed},
    {EMBER_STAT_CONTEXT_NO_TLS_BLOCK, &BpfStats::context_no_tls_block},
    {EMBER_STAT_CONTEXT_NOTICES, &BpfStats::context_notices},
    {EMBER_STAT_CONTEXT_NOTICES_LOST, &BpfStats::context_notices_lost},
    {EMBER_STAT_CONTEXT_NOTICES_SUPPRESSED, &BpfStats::context_notices_suppressed},
};

// Every constant below EMBER_STAT_COUNT once, every member once.
constexpr bool PairsEachStatOnce() {
  bool seen[EMBER_STAT_COUNT] = {};
  for (size_t i = 0; i < std::size(kBpfStatFields); ++i) {
    const int index = kBpfStatFields[i].index;
    if (index < 0 || index >= EMBER_STAT_COUNT || seen[index]) return false;
    seen[index] = true;
    for (size_t j = 0; j < i; ++j) {
      if (kBpfStatFields[j].member == kBpfStatFields[i].member) return false;
    }
  }
  return true;
}

static_assert(std::size(kBpfStatFields) == EMBER_STAT_COUNT,
              "one BpfStats member for each counter of bpf/sample_record.h's enum ember_stat");
static_assert(sizeof(BpfStats) == EMBER_STAT_COUNT * sizeof(uint64_t),
              "every BpfStats member counts a counter of the stats map");
static_assert(PairsEachStatOnce(), "kBpfStatFields pairs a constant or a member twice");

// The walk's maps, written through the bpf syscall.
class BpfUnwindMaps : public UnwindMaps {
 public:
  BpfUnwindMaps(const bpf_map* rows, const bpf_map* buckets, const bpf_map* procs)
      : rows_(rows), buckets_(buckets), procs_(procs) {}

  absl::Status WriteRows(uint32_t first, std::span<const ember_unwind_row> rows) override {
    return WriteArray(rows_, first, rows, "writing CFI rows to the BPF program");
  }

  absl::Status WriteBuckets(uint32_t first, std::span<const uint32_t> buckets) override {
    return WriteArray(buckets_, first, buckets, "writing CFI row buckets to the BPF program");
  }

  absl::Status SetProcess(uint32_t pid, const ember_unwind_proc& proc) override {
    if (bpf_map__update_elem(procs_, &pid, sizeof(pid), &proc, sizeof(proc), BPF_ANY) != 0) {
      return ErrnoStatus(errno, absl::StrCat("giving the BPF program the mappings of pid ", pid));
    }
    return absl::OkStatus();
  }

  void RemoveProcess(uint32_t pid) override { bpf_map__delete_elem(procs_, &pid, sizeof(pid), 0); }

 private:
  // Values [first, first + values.size()) of an array map, a batch per call of the syscall: a
  // table of 100k rows is 25 calls, not 100k.
  template <typename T>
  static absl::Status WriteArray(const bpf_map* map, uint32_t first, std::span<const T> values,
                                 absl::string_view what) {
    constexpr size_t kBatch = 4096;
    std::vector<uint32_t> keys;
    for (size_t done = 0; done < values.size();) {
      const size_t count = std::min(kBatch, values.size() - done);
      keys.resize(count);
      for (size_t i = 0; i < count; ++i) keys[i] = first + static_cast<uint32_t>(done + i);
      uint32_t written = static_cast<uint32_t>(count);
      if (bpf_map_update_batch(bpf_map__fd(map), keys.data(), values.data() + done, &written,
                               nullptr) != 0) {
        return ErrnoStatus(errno, what);
      }
      done += count;
    }
    return absl::OkStatus();
  }

  const bpf_map* rows_;
  const bpf_map* buckets_;
  const bpf_map* procs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpfProfiler>> BpfProfiler::Create(const BpfProfilerConfig& config,
                                                                 SampleHandler handler) {
  libbpf_set_print(LibbpfPrint);
  struct stat st;
  if (stat(kKernelBtf, &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel BTF not found at ", kKernelBtf,
        ": Ember needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (Linux 5.8 or later)"));
  }
  std::ifstream online_file("/sys/devices/system/cpu/online");
  std::string online_text;
  std::getline(online_file, online_text);
  auto cpus = ParseCpuList(online_text);
  if (!cpus.ok()) return cpus.status();

  std::unique_ptr<BpfProfiler> self(new BpfProfiler());
  self->handler_ = std::move(handler);
  self->skeleton_ = profiler_bpf__open();
  if (self->skeleton_ == nullptr) return ErrnoStatus(errno, "opening the BPF object");

  if (config.stack_snapshot_bytes > EMBER_MAX_SNAPSHOT_BYTES) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stack-snapshot-bytes: at most ", EMBER_MAX_SNAPSHOT_BYTES));
  }
  self->skeleton_->rodata->filter_pids = !config.pids.empty();
  self->skeleton_->rodata->snapshot_limit = config.stack_snapshot_bytes;
  self->skeleton_->rodata->skip_tgid = config.skip_tgid;
  self->skeleton_->rodata->unwind_in_bpf = config.unwind_rows > 0;
  self->skeleton_->rodata->new_process_wakeup_gap_ns = config.new_process_wakeup_gap_ns;
  if (int err = bpf_map__set_max_entries(self->skeleton_->maps.unwind_rows,
                                         std::max<uint32_t>(config.unwind_rows, 1));
      err != 0) {
    return ErrnoStatus(err, "sizing the CFI row table");
  }
  if (int err = bpf_map__set_max_entries(self->skeleton_->maps.unwind_buckets,
                                         std::max<uint32_t>(config.unwind_rows, 1));
      err != 0) {
    return ErrnoStatus(err, "sizing the CFI row buckets");
  }
  size_t ring_bytes = config.ring_buffer_bytes ? config.ring_buffer_bytes
                                               : RingBufferBytes(cpus->size(), config.sampling_hz,
                                                                 config.stack_snapshot_bytes);
  int possible_cpus = libbpf_num_possible_cpus();
  if (possible_cpus <= 0) return ErrnoStatus(possible_cpus, "counting the possible CPUs");
  if (int err = bpf_map__set_max_entries(self->skeleton_->maps.scratch, possible_cpus); err != 0) {
    return ErrnoStatus(err, "sizing the per-CPU record buffers");
  }
  if (int err = bpf_map__set_max_entries(self->skeleton_->maps.samples, ring_bytes); err != 0) {
    return ErrnoStatus(err, "sizing the ring buffer");
  }
  if (int err = profiler_bpf__load(self->skeleton_); err != 0) {
    return ErrnoStatus(err, "loading the BPF program (set --log-level=debug for libbpf's log)");
  }
  for (uint32_t pid : config.pids) {
    uint8_t one = 1;
    if (bpf_map__update_elem(self->skeleton_->maps.pid_filter, &pid, sizeof(pid), &one, sizeof(one),
                             BPF_ANY) != 0) {
      return ErrnoStatus(errno, absl::StrCat("adding pid ", pid, " to the filter"));
    }
  }
  if (config.unwind_rows > 0) {
    self->unwind_maps_ = std::make_unique<BpfUnwindMaps>(self->skeleton_->maps.unwind_rows,
                                                         self->skeleton_->maps.unwind_buckets,
                                                         self->skeleton_->maps.unwind_procs);
  }
  self->ring_ =
      ring_buffer__new(bpf_map__fd(self->skeleton_->maps.samples), &OnRecord, self.get(), nullptr);
  if (self->ring_ == nullptr) return ErrnoStatus(errno, "opening the ring buffer");

  for (int cpu : *cpus) {
    int fd = OpenCpuClock(cpu, config.sampling_hz);
    if (fd < 0) {
      return ErrnoStatus(errno, absl::StrCat("perf_event_open of cpu-clock on CPU ", cpu));
    }
    self->perf_fds_.push_back(fd);
    bpf_link* link = bpf_program__attach_perf_event(self->skeleton_->progs.profile__sample, fd);
    if (link == nullptr) {
      return ErrnoStatus(errno, absl::StrCat("attaching to the perf event of CPU ", cpu));
    }
    self->links_.push_back(link);
  }
  self->exec_link_ = bpf_program__attach(self->skeleton_->progs.profile__exec);
  if (self->exec_link_ == nullptr) {
    return ErrnoStatus(errno, "attaching to the sched_process_exec tracepoint");
  }
  self->AttachPrctl();
  return self;
}

void BpfProfiler::AttachPrctl() {
  // libbpf finds the tracepoint's id in tracefs, which not every host mounts. The agent is root
  // here; a mount that fails still leaves the attach to try (debugfs may hold it).
  if (access(kTracefsEvents, F_OK) != 0 && access(kDebugfsEvents, F_OK) != 0) {
    if (mount("nodev", kTracefs, "tracefs", 0, nullptr) == 0) {
      spdlog::info("mounted tracefs at {} for the sys_enter_prctl tracepoint", kTracefs);
    } else {
      spdlog::debug("mounting tracefs at {}: {}", kTracefs, strerror(errno));
    }
  }
  prctl_link_ = bpf_program__attach(skeleton_->progs.profile__prctl);
  if (prctl_link_ == nullptr) {
    spdlog::warn(
        "process-context re-publish notices are off (attaching to the sys_enter_prctl "
        "tracepoint: {}): a process's context is read again only when its maps are",
        strerror(errno));
  }
}

BpfProfiler::~BpfProfiler() {
  for (bpf_link* link : links_) bpf_link__destroy(link);
  if (exec_link_ != nullptr) bpf_link__destroy(exec_link_);
  if (prctl_link_ != nullptr) bpf_link__destroy(prctl_link_);
  for (int fd : perf_fds_) close(fd);
  ring_buffer__free(ring_);
  profiler_bpf__destroy(skeleton_);
}

int BpfProfiler::OnRecord(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfProfiler*>(ctx);
  if (std::optional<uint32_t> pid = DecodeContextNotice(data, size)) {
    if (self->context_notice_) self->context_notice_(*pid);
    return 0;
  }
  SampleView view;
  if (DecodeSample(data, size, &view) != DecodeResult::kOk) {
    ++self->malformed_records_;
    return 0;
  }
  self->handler_(view);
  return 0;
}

absl::StatusOr<int> BpfProfiler::Poll(int timeout_ms) {
  // Records wake the poll only when the buffer is a quarter full or their process is new to the
  // agent (bpf/profiler.bpf.c): what is queued is read before the wait and what came meanwhile
  // after it.
  int before = ring_buffer__consume(ring_);
  if (before < 0) return ErrnoStatus(before, "reading the ring buffer");
  int woken = ring_buffer__poll(ring_, timeout_ms);
  if (woken == -EINTR) woken = 0;
  if (woken < 0) return ErrnoStatus(woken, "reading the ring buffer");
  int after = ring_buffer__consume(ring_);
  if (after < 0) return ErrnoStatus(after, "reading the ring buffer");
  return before + woken + after;
}

BpfStats BpfProfiler::ReadStats() const {
  BpfStats stats;
  int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) return stats;
  std::vector<uint64_t> values(ncpus);
  for (uint32_t index = 0; index < EMBER_STAT_COUNT; ++index) {
    if (bpf_map__lookup_elem(skeleton_->maps.stats, &index, sizeof(index), values.data(),
                             values.size() * sizeof(uint64_t), 0) != 0) {
      continue;
    }
    for (uint64_t v : values) AddBpfStat(index, v, stats);
  }
  return stats;
}

std::optional<std::vector<uint64_t>> BpfProfiler::ReadPhaseSums() const {
  const bpf_map* map = bpf_object__find_map_by_name(skeleton_->obj, "phase_ns");
  const int ncpus = libbpf_num_possible_cpus();
  if (map == nullptr || ncpus <= 0) return std::nullopt;
  std::vector<uint64_t> sums(EMBER_PHASE_COUNT);
  std::vector<uint64_t> values(ncpus);
  for (uint32_t index = 0; index < EMBER_PHASE_COUNT; ++index) {
    if (bpf_map__lookup_elem(map, &index, sizeof(index), values.data(),
                             values.size() * sizeof(uint64_t), 0) != 0) {
      return std::nullopt;
    }
    for (uint64_t v : values) sums[index] += v;
  }
  return sums;
}

void AddBpfStat(uint32_t index, uint64_t value, BpfStats& stats) {
  for (const BpfStatField& field : kBpfStatFields) {
    if (static_cast<uint32_t>(field.index) == index) {
      stats.*field.member += value;
      return;
    }
  }
}

bool BpfProfiler::MapsAccessible() const {
  int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) return false;
  std::vector<uint64_t> values(ncpus);
  uint32_t index = 0;
  return bpf_map__lookup_elem(skeleton_->maps.stats, &index, sizeof(index), values.data(),
                              values.size() * sizeof(uint64_t), 0) == 0;
}

absl::Status BpfProfiler::SetPythonProcess(uint32_t pid, const ember_python_proc& config) {
  if (bpf_map__update_elem(skeleton_->maps.python_procs, &pid, sizeof(pid), &config, sizeof(config),
                           BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("configuring the Python frames of pid ", pid));
  }
  python_pids_.insert(pid);
  UpdateKnownFlags(pid);
  return absl::OkStatus();
}

void BpfProfiler::RemovePythonProcess(uint32_t pid) {
  bpf_map__delete_elem(skeleton_->maps.python_procs, &pid, sizeof(pid), 0);
  python_pids_.erase(pid);
  UpdateKnownFlags(pid);
}

absl::Status BpfProfiler::SetThreadContextProcess(uint32_t pid, const ember_context_proc& config) {
  if (bpf_map__update_elem(skeleton_->maps.context_procs, &pid, sizeof(pid), &config,
                           sizeof(config), BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("configuring the thread-context read of pid ", pid));
  }
  context_pids_.insert(pid);
  UpdateKnownFlags(pid);
  return absl::OkStatus();
}

void BpfProfiler::RemoveThreadContextProcess(uint32_t pid) {
  bpf_map__delete_elem(skeleton_->maps.context_procs, &pid, sizeof(pid), 0);
  context_pids_.erase(pid);
  UpdateKnownFlags(pid);
}

uint8_t BpfProfiler::KnownFlags(uint32_t pid) const {
  return EMBER_KNOWN_PROC | (python_pids_.contains(pid) ? EMBER_KNOWN_PROC_PYTHON : 0) |
         (context_pids_.contains(pid) ? EMBER_KNOWN_PROC_CONTEXT : 0);
}

void BpfProfiler::UpdateKnownFlags(uint32_t pid) {
  // Only an entry that is there: an exec may just have removed it, and the process must then
  // stay unknown. Without an entry the program looks the Python entry up anyway.
  const uint8_t flags = KnownFlags(pid);
  bpf_map__update_elem(skeleton_->maps.known_procs, &pid, sizeof(pid), &flags, sizeof(flags),
                       BPF_EXIST);
}

void BpfProfiler::MarkProcessKnown(uint32_t pid) {
  const uint8_t flags = KnownFlags(pid);
  bpf_map__update_elem(skeleton_->maps.known_procs, &pid, sizeof(pid), &flags, sizeof(flags),
                       BPF_ANY);
}

void BpfProfiler::ForgetProcess(uint32_t pid) {
  bpf_map__delete_elem(skeleton_->maps.known_procs, &pid, sizeof(pid), 0);
  if (context_pids_.erase(pid) > 0) {
    bpf_map__delete_elem(skeleton_->maps.context_procs, &pid, sizeof(pid), 0);
  }
}

}  // namespace ember
