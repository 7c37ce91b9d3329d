// The fixed-work workload of bench/overhead.sh (issue 7): one process per core, each doing the
// same number of work units, every unit a descent through 24 to 39 frames of eight step functions
// chosen by a hash of the unit number (4096 paths, so thousands of distinct stacks) down to one of
// four leaves. Built with GCC -O2 -fomit-frame-pointer: only DWARF CFI walks it.
//
//   overhead_work --calibrate SECONDS        prints how many units one process does in SECONDS
//   overhead_work --pulse BURN_MS SECONDS    works BURN_MS of every second for SECONDS (the soak's
//                                            long-lived processes)
//   overhead_work UNITS [WORKERS [WARM_UNITS]]
//                                            waits for one byte on stdin, forks WORKERS (default:
//                                            every online CPU) that do WARM_UNITS units each
//                                            (default 0) and wait for each other, then UNITS units
//                                            each, timed; prints "elapsed_s=... units_per_s=...",
//                                            then stays alive (workers too) until SIGTERM or 600 s,
//                                            so that a profiler can still read its maps when it
//                                            stops. The warm-up lets a profiler see the stacks
//                                            before the timed part: its caches are then warm.
//
// Every function of the workload is named ow_*: bench/overhead.sh tells its samples by that name.
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "overhead_units.h"

#define kMaxWorkers 1024

static volatile uint64_t sink;

NOIPA void ow_worker(uint64_t units) {
  uint64_t acc = 0;
  for (uint64_t u = 0; u < units; ++u) acc += ow_unit(u);
  sink = acc;
}

static int Calibrate(double seconds) {
  uint64_t units = 0, acc = 0;
  double end = Now() + seconds;
  while (Now() < end) {
    for (int i = 0; i < 16; ++i) acc += ow_unit(units++);
  }
  sink = acc;
  printf("%llu\n", (unsigned long long)units);
  return 0;
}

// A long-lived, mostly idle process for the soak: BURN_MS of work units every second for SECONDS
// (ended early by its parent's death), so that a profiler tracks many processes at once.
static int Pulse(double burn_ms, double seconds) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  uint64_t unit = (uint64_t)getpid(), acc = 0;
  double end = Now() + seconds;
  while (Now() < end) {
    double second = Now(), until = second + burn_ms / 1000;
    while (Now() < until) acc += ow_unit(unit++);
    double rest = second + 1 - Now();
    if (rest > 0) {
      struct timespec ts = {(time_t)rest, (long)((rest - (time_t)rest) * 1e9)};
      nanosleep(&ts, NULL);
    }
  }
  sink = acc;
  return 0;
}

static void OnTerm(int sig) { (void)sig; }

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--calibrate") == 0) return Calibrate(atof(argv[2]));
  if (argc == 4 && strcmp(argv[1], "--pulse") == 0) return Pulse(atof(argv[2]), atof(argv[3]));
  if (argc < 2 || argc > 4) {
    fprintf(stderr,
            "usage: overhead_work UNITS [WORKERS [WARM_UNITS]] | --calibrate SECONDS"
            " | --pulse MS SECONDS\n");
    return 2;
  }
  char *end, *warm_end = NULL;
  unsigned long long units = strtoull(argv[1], &end, 10);
  long workers = argc > 2 ? atol(argv[2]) : sysconf(_SC_NPROCESSORS_ONLN);
  unsigned long long warm_units = argc > 3 ? strtoull(argv[3], &warm_end, 10) : 0;
  if (*end || (warm_end != NULL && *warm_end) || units == 0 || workers < 1 ||
      workers > kMaxWorkers) {
    fprintf(stderr, "overhead_work: bad UNITS, WORKERS or WARM_UNITS\n");
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnTerm;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  // The start byte, waited for at most 600 s.
  struct pollfd in = {.fd = 0, .events = POLLIN};
  char go;
  if (poll(&in, 1, 600 * 1000) != 1 || read(0, &go, 1) != 1) return 3;

  // done: a byte from each worker when warm, and one when its timed units are done. go: a byte
  // to each worker when all are warm.
  int done[2], go_pipe[2];
  if (pipe(done) != 0 || pipe(go_pipe) != 0) return 4;
  pid_t pids[kMaxWorkers];
  for (long w = 0; w < workers; ++w) {
    pids[w] = fork();
    if (pids[w] < 0) return 4;
    if (pids[w] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() == 1) _exit(5);
      ow_worker(warm_units);
      char c = 'w';
      if (write(done[1], &c, 1) != 1 || read(go_pipe[0], &c, 1) != 1) _exit(4);
      ow_worker(units);
      c = 'd';
      if (write(done[1], &c, 1) != 1) _exit(4);
      // Stay alive, asleep, until the parent ends (PDEATHSIG) or 600 s pass.
      sleep(600);
      _exit(0);
    }
  }
  for (long w = 0; w < workers; ++w) {
    char c;
    if (read(done[0], &c, 1) != 1) return 4;
  }
  double start = Now();
  for (long w = 0; w < workers; ++w) {
    if (write(go_pipe[1], "g", 1) != 1) return 4;
  }
  for (long w = 0; w < workers; ++w) {
    char c;
    if (read(done[0], &c, 1) != 1) return 4;
  }
  double elapsed = Now() - start;
  printf("elapsed_s=%.4f units_per_s=%.1f units=%llu workers=%ld\n", elapsed,
         (double)units * workers / elapsed, units, workers);
  fflush(stdout);
  // Until SIGTERM (its handler interrupts the sleep) or 600 s; then the workers go too.
  sleep(600);
  for (long w = 0; w < workers; ++w) kill(pids[w], SIGKILL);
  for (long w = 0; w < workers; ++w) waitpid(pids[w], NULL, 0);
  return 0;
}
