// A running profiler's slowdown of the workload, measured inside one run (issue 7): between runs,
// this host's speed drifts by 1.5 to 3.5% a round, more than the 1% to be resolved. The
// workload of bench/overhead_work.c runs on every CPU without a break while this program turns the
// profiler's perf events off and on (PERF_EVENT_IOC_DISABLE/ENABLE on copies of its fds, taken with
// pidfd_getfd), in pairs of phases of random length in a random order, and compares the work done
// per second with sampling on and off within each pair. Off, no timer interrupt fires for the
// profiler, its BPF program does not run and it gets no samples; it is still loaded and running.
//
//   sampling_toggle PID SECONDS [WARM_SECONDS [SETTLE_MS]]
//
// PID: the profiler (every perf event it holds is toggled: for Ember and bpftrace, the sampling
// events of each CPU; perf record may hold a tracking event as well). WARM_SECONDS (default 10):
// the workload runs with sampling on before the first pair, so that the profiler has seen its
// stacks. SETTLE_MS (default 2100): after each switch, this long is not measured: Ember reads its
// samples up to 2 s after they are taken, and the work on one phase's samples must not be counted
// in the next. A measured part lasts 0.4 to 1.2 s (uniform), so phases do not keep step with the
// 99 Hz period or the profiler's own timers. Short parts, because on this host the work done in
// two adjacent windows differs by about 2% whether they last 0.5 s or 5 s: more pairs, not longer
// ones, narrow the interval. Prints a line per pair ("pair N ON_RATE OFF_RATE RATIO", units a
// second), then "sampling_toggle: ..." with the mean ratio and its 95% bootstrap interval. The
// events are left on at the end, and on any exit of this program.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "overhead_units.h"

#define kMaxEvents 4096
#define kMaxWorkers 1024
#define kMaxPairs 100000

static int events[kMaxEvents];
static int event_count;
static volatile sig_atomic_t stop_requested;
static volatile uint64_t sink;

// One counter per worker, each on its own cache line: units done so far.
struct Counter {
  uint64_t units;
  char pad[56];
};

static void SleepFor(double seconds) {
  struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
  while (!stop_requested && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int SetEvents(int on) {
  for (int i = 0; i < event_count; ++i) {
    if (ioctl(events[i], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0) != 0) return -1;
  }
  return 0;
}

static void EnableAtExit(void) { SetEvents(1); }
static void OnSignal(int sig) {
  (void)sig;
  stop_requested = 1;
}

// Copies of every perf event fd PID holds, into events[].
static int TakeEvents(pid_t pid) {
  char dir_path[64];
  snprintf(dir_path, sizeof dir_path, "/proc/%d/fd", (int)pid);
  DIR* dir = opendir(dir_path);
  if (dir == NULL) {
    fprintf(stderr, "sampling_toggle: cannot read %s: %s\n", dir_path, strerror(errno));
    return -1;
  }
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    fprintf(stderr, "sampling_toggle: pidfd_open(%d): %s\n", (int)pid, strerror(errno));
    closedir(dir);
    return -1;
  }
  struct dirent* entry;
  while ((entry = readdir(dir)) != NULL) {
    char link_path[PATH_MAX], target[128];
    if (entry->d_name[0] == '.') continue;
    snprintf(link_path, sizeof link_path, "%s/%s", dir_path, entry->d_name);
    ssize_t n = readlink(link_path, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (strcmp(target, "anon_inode:[perf_event]") != 0) continue;
    if (event_count == kMaxEvents) break;
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, atoi(entry->d_name), 0);
    if (fd < 0) {
      fprintf(stderr, "sampling_toggle: pidfd_getfd(%d, %s): %s\n", (int)pid, entry->d_name,
              strerror(errno));
      close(pidfd);
      closedir(dir);
      return -1;
    }
    events[event_count++] = fd;
  }
  close(pidfd);
  closedir(dir);
  return 0;
}

static uint64_t UnitsDone(const struct Counter* counters, long workers) {
  uint64_t total = 0;
  for (long w = 0; w < workers; ++w) total += __atomic_load_n(&counters[w].units, __ATOMIC_RELAXED);
  return total;
}

// Units a second over a measured part of SECONDS, after the switch's settling time.
static double MeasuredRate(const struct Counter* counters, long workers, double seconds) {
  uint64_t u0 = UnitsDone(counters, workers);
  double t0 = Now();
  SleepFor(seconds);
  uint64_t u1 = UnitsDone(counters, workers);
  double t1 = Now();
  return (double)(u1 - u0) / (t1 - t0);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t NextRandom(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static double Uniform(void) { return (NextRandom() >> 11) * (1.0 / 9007199254740992.0); }

static int CompareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double ratios[kMaxPairs];
static double sorted[kMaxPairs];
static double means[2000];

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    fprintf(stderr, "usage: sampling_toggle PID SECONDS [WARM_SECONDS [SETTLE_MS]]\n");
    return 2;
  }
  char *end_pid, *end_seconds, *end_warm = NULL, *end_settle = NULL;
  long pid = strtol(argv[1], &end_pid, 10);
  double seconds = strtod(argv[2], &end_seconds);
  double warm = argc > 3 ? strtod(argv[3], &end_warm) : 10;
  double settle = argc > 4 ? strtod(argv[4], &end_settle) / 1000 : 2.1;
  if (*end_pid || pid <= 0 || *end_seconds || !(seconds > 0) || (end_warm && *end_warm) ||
      !(warm >= 0) || (end_settle && *end_settle) || !(settle >= 0)) {
    fprintf(stderr, "sampling_toggle: bad PID, SECONDS, WARM_SECONDS or SETTLE_MS\n");
    return 2;
  }
  if (TakeEvents((pid_t)pid) != 0) return 1;
  if (event_count == 0) {
    fprintf(stderr,
            "sampling_toggle: pid %ld holds no perf events (not a profiler, or not attached)\n",
            pid);
    return 1;
  }
  atexit(EnableAtExit);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  rng_state ^= (uint64_t)getpid() << 32 ^ (uint64_t)(Now() * 1e9);

  long workers = sysconf(_SC_NPROCESSORS_ONLN);
  if (workers < 1 || workers > kMaxWorkers) workers = workers < 1 ? 1 : kMaxWorkers;
  struct Counter* counters = mmap(NULL, sizeof(struct Counter) * workers, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (counters == MAP_FAILED) {
    perror("sampling_toggle: mmap");
    return 1;
  }
  pid_t pids[kMaxWorkers];
  for (long w = 0; w < workers; ++w) {
    pids[w] = fork();
    if (pids[w] < 0) {
      perror("sampling_toggle: fork");
      return 1;
    }
    if (pids[w] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() == 1) _exit(1);
      uint64_t acc = 0;
      for (uint64_t u = 0;; ++u) {
        acc += ow_unit(u);
        __atomic_store_n(&counters[w].units, u + 1, __ATOMIC_RELAXED);
        if ((u & 1023) == 0) sink = acc;
      }
    }
  }

  int status = 0;
  if (SetEvents(1) != 0) {
    fprintf(stderr, "sampling_toggle: enabling pid %ld's perf events: %s\n", pid, strerror(errno));
    status = 1;
  }
  SleepFor(warm);
  int pairs = 0;
  double until = Now() + seconds;
  while (status == 0 && !stop_requested && Now() < until && pairs < kMaxPairs) {
    double rate[2] = {0, 0};  // [0] off, [1] on
    int first = (int)(NextRandom() & 1);
    for (int i = 0; i < 2 && status == 0; ++i) {
      int on = i == 0 ? first : !first;
      if (SetEvents(on) != 0) {
        fprintf(stderr, "sampling_toggle: switching pid %ld's perf events: %s\n", pid,
                strerror(errno));
        status = 1;
        break;
      }
      SleepFor(settle);
      rate[on] = MeasuredRate(counters, workers, 0.4 + 0.8 * Uniform());
    }
    if (status != 0 || stop_requested) break;
    if (kill((pid_t)pid, 0) != 0) {
      fprintf(stderr, "sampling_toggle: the profiler, pid %ld, exited during the run\n", pid);
      status = 1;
      break;
    }
    ratios[pairs] = rate[1] / rate[0];
    printf("pair %d %.1f %.1f %.5f\n", pairs + 1, rate[1], rate[0], ratios[pairs]);
    fflush(stdout);
    ++pairs;
  }
  SetEvents(1);
  for (long w = 0; w < workers; ++w) kill(pids[w], SIGKILL);
  for (long w = 0; w < workers; ++w) waitpid(pids[w], NULL, 0);
  if (status != 0) return status;
  if (pairs < 2) {
    fprintf(stderr, "sampling_toggle: only %d pairs in %.0f s: give it more SECONDS\n", pairs,
            seconds);
    return 1;
  }

  // The mean ratio and its 95% interval from 2000 bootstrap resamples of the pairs; the median.
  double sum = 0;
  for (int i = 0; i < pairs; ++i) sum += ratios[i];
  for (int b = 0; b < 2000; ++b) {
    double t = 0;
    for (int i = 0; i < pairs; ++i) t += ratios[NextRandom() % (uint64_t)pairs];
    means[b] = t / pairs;
  }
  qsort(means, 2000, sizeof means[0], CompareDoubles);
  memcpy(sorted, ratios, sizeof ratios[0] * pairs);
  qsort(sorted, pairs, sizeof sorted[0], CompareDoubles);
  double median = pairs % 2 ? sorted[pairs / 2] : (sorted[pairs / 2 - 1] + sorted[pairs / 2]) / 2;
  double var = 0;
  for (int i = 0; i < pairs; ++i) var += (ratios[i] - sum / pairs) * (ratios[i] - sum / pairs);
  printf(
      "sampling_toggle: pid %ld, %d perf events, %d pairs: throughput with sampling on over off, "
      "mean %.4f (95%% CI %.4f..%.4f), median %.4f, standard deviation of a pair %.2f%%\n",
      pid, event_count, pairs, sum / pairs, means[50], means[1949], median,
      100 * sqrt(var / (pairs - 1)));
  return 0;
}
