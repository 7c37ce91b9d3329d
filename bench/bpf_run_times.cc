// Per-run times of a loaded BPF program, for the median in-kernel cost per sample that
// bench/unwind_vs_perf.sh reports next to bpf_stats' mean.
//
//   bpf_run_times --prog-id ID [--poll-us 500] [--min-ns 1000]
//
// The project machine's kernel has no kprobes and refuses tracing (fentry) programs with EPERM,
// so nothing can hook one run there. bpf_stats can be read one run at a time instead: the program's
// cumulative run_cnt and run_time_ns are read every poll-us microseconds, and a window in which
// run_cnt grew by exactly one holds exactly that run's time, as bpf_stats measured it. At 99 Hz
// runs are milliseconds apart, so most runs fall in a window of their own; those that share one
// (with a run on another CPU) are counted but not timed.
// Runs shorter than min-ns are the early exits of the pid filter (other processes, about 0.3 us)
// and are counted apart from the sampled runs. Runs until SIGINT or SIGTERM, then prints one
// line of key=value pairs (times in nanoseconds).
#include <bpf/bpf.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t stop = 0;
void OnSignal(int) { stop = 1; }

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "bpf_run_times: %s\nusage: bpf_run_times --prog-id ID [--poll-us 500] "
               "[--min-ns 1000]\n",
               why.c_str());
  return 2;
}

unsigned long long Percentile(const std::vector<uint64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5)];
}

bool ReadStats(int fd, uint64_t* runs, uint64_t* run_ns) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return false;
  *runs = info.run_cnt;
  *run_ns = info.run_time_ns;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned long prog_id = 0;
  unsigned long poll_us = 500;
  unsigned long min_ns = 1000;
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return Usage("missing value of " + flag);
    char* end = nullptr;
    unsigned long value = std::strtoul(argv[i + 1], &end, 10);
    if (*end != '\0' || value == 0 || value > UINT32_MAX) {
      return Usage(flag + ": expected a positive number");
    }
    if (flag == "--prog-id") {
      prog_id = value;
    } else if (flag == "--poll-us") {
      poll_us = value;
    } else if (flag == "--min-ns") {
      min_ns = value;
    } else {
      return Usage("unknown flag " + flag);
    }
  }
  if (prog_id == 0) return Usage("--prog-id is required");
  if (geteuid() != 0) {
    std::fprintf(stderr, "bpf_run_times: needs root (it reads BPF program statistics)\n");
    return 1;
  }
  int fd = bpf_prog_get_fd_by_id(prog_id);
  if (fd < 0) {
    std::fprintf(stderr, "bpf_run_times: no BPF program with id %lu: %s\n", prog_id,
                 std::strerror(errno));
    return 1;
  }
  // Statistics stay on while this fd is open, whatever kernel.bpf_stats_enabled says.
  int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (stats_fd < 0) {
    std::fprintf(stderr, "bpf_run_times: cannot enable BPF run-time statistics: %s\n",
                 std::strerror(errno));
    return 1;
  }
  prctl(PR_SET_TIMERSLACK, 1);  // sleep poll-us, not poll-us plus the default 50 us slack
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);

  uint64_t runs = 0;
  uint64_t run_ns = 0;
  if (!ReadStats(fd, &runs, &run_ns)) {
    std::fprintf(stderr, "bpf_run_times: reading program %lu: %s\n", prog_id, std::strerror(errno));
    return 1;
  }
  std::printf("polling\n");
  std::fflush(stdout);
  const uint64_t first_runs = runs;
  const uint64_t first_run_ns = run_ns;
  std::vector<uint64_t> sampled;  // single-run windows of at least min_ns
  uint64_t short_runs = 0;        // single-run windows below min_ns
  uint64_t shared_runs = 0;       // runs that shared a window with another
  uint64_t polls = 0;
  const timespec pause{0, static_cast<long>(poll_us * 1000)};
  while (!stop) {
    clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, nullptr);
    uint64_t now_runs = 0;
    uint64_t now_run_ns = 0;
    if (!ReadStats(fd, &now_runs, &now_run_ns)) break;  // the program was unloaded
    ++polls;
    const uint64_t new_runs = now_runs - runs;
    if (new_runs == 1) {
      const uint64_t ns = now_run_ns - run_ns;
      if (ns >= min_ns) {
        sampled.push_back(ns);
      } else {
        ++short_runs;
      }
    } else if (new_runs > 1) {
      shared_runs += new_runs;
    }
    runs = now_runs;
    run_ns = now_run_ns;
  }
  close(stats_fd);
  close(fd);

  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  const double cpu_s = static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                       static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
  std::sort(sampled.begin(), sampled.end());
  double sum = 0;
  for (uint64_t ns : sampled) sum += static_cast<double>(ns);
  std::printf(
      "runs=%llu run_ns=%llu polls=%llu short_runs=%llu shared_runs=%llu sampled_runs=%zu "
      "mean_ns=%.0f median_ns=%llu p10_ns=%llu p90_ns=%llu p99_ns=%llu max_ns=%llu "
      "poller_cpu_s=%.3f\n",
      static_cast<unsigned long long>(runs - first_runs),
      static_cast<unsigned long long>(run_ns - first_run_ns),
      static_cast<unsigned long long>(polls), static_cast<unsigned long long>(short_runs),
      static_cast<unsigned long long>(shared_runs), sampled.size(),
      sampled.empty() ? 0.0 : sum / static_cast<double>(sampled.size()), Percentile(sampled, 0.5),
      Percentile(sampled, 0.1), Percentile(sampled, 0.9), Percentile(sampled, 0.99),
      sampled.empty() ? 0ull : Percentile(sampled, 1.0), cpu_s);
  return 0;
}
