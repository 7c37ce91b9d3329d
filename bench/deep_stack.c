// A CPU-bound program whose samples sit under a deep user stack, so that the snapshot limit
// (--stack-snapshot-bytes) binds: bench/unwind_vs_perf.sh --deep-stack FRAMES. Like cfi_chains it
// waits for one byte on stdin, then for argv[1] seconds burns CPU in a leaf called beneath a
// recursion of argv[2] frames of about 1 KiB each. Built like cfi_chains: GCC -O2, no frame
// pointers, so only CFI walks it.
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOIPA __attribute__((noinline, noipa))

static volatile uint64_t sink;

NOIPA void leaf(void) {
  uint64_t x = sink + 1;
  for (int i = 0; i < 20000; ++i) x = x * 6364136223846793005ull + (x >> 7);
  sink = x;
}

// One frame of about 1 KiB; the work after the call rules out a tail call.
NOIPA void descend(int depth) {
  volatile uint8_t pad[1000];
  pad[0] = (uint8_t)depth;
  pad[999] = (uint8_t)sink;
  if (depth > 1) {
    descend(depth - 1);
  } else {
    leaf();
  }
  sink += pad[0] + pad[999];
}

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 5.0;
  int depth = argc > 2 ? atoi(argv[2]) : 48;
  if (seconds <= 0 || depth < 1 || depth > 100) return 2;  // the unwinder stops at 127 frames
  char go;
  if (read(0, &go, 1) != 1) return 3;
  double end = Now() + seconds;
  while (Now() < end) descend(depth);
  return 0;
}
