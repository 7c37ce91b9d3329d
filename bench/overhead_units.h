// The work unit of bench/overhead_work.c and bench/sampling_toggle.c (issue 7), and the clock
// both time it with. A unit is a descent through 24 to 39 frames of eight step functions chosen
// by a hash of the unit number (4096 paths, so thousands of distinct stacks) down to one of four
// leaves. Included by one file of each program, built with GCC -O2 -fomit-frame-pointer: only
// DWARF CFI walks it. Every function is named ow_*: bench/overhead.sh tells the workload's
// samples by that name.
#ifndef EMBER_BENCH_OVERHEAD_UNITS_H_
#define EMBER_BENCH_OVERHEAD_UNITS_H_

#include <stdint.h>
#include <time.h>

#define NOIPA __attribute__((noinline, noipa))

static inline uint64_t Mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  return x;
}

static inline uint64_t Spin(uint64_t x, int n) {
  for (int i = 0; i < n; ++i) x = x * 6364136223846793005ull + (x >> 7);
  return x;
}

// Four leaves of weights 1:2:3:4, where most samples land.
NOIPA uint64_t ow_leaf_0(uint64_t h) { return Spin(h, 2000); }
NOIPA uint64_t ow_leaf_1(uint64_t h) { return Spin(h, 4000); }
NOIPA uint64_t ow_leaf_2(uint64_t h) { return Spin(h, 6000); }
NOIPA uint64_t ow_leaf_3(uint64_t h) { return Spin(h, 8000); }
static uint64_t (*const kLeaves[4])(uint64_t) = {ow_leaf_0, ow_leaf_1, ow_leaf_2, ow_leaf_3};

typedef uint64_t (*StepFn)(uint64_t, int);
static const StepFn kSteps[8];

// One frame of a descent: a little work of its own (so some samples stop mid-stack), a call to the
// next step chosen by the hash, and work after the call (no tail call). The volatile pad gives
// each frame about 100 bytes, so a 39-frame stack stays well inside a 16 KiB snapshot.
#define OW_STEP(k)                                                                        \
  NOIPA uint64_t ow_step_##k(uint64_t h, int depth) {                                     \
    volatile uint64_t pad[8];                                                             \
    pad[0] = Spin(h + k, 40);                                                             \
    uint64_t next = Mix(h + depth);                                                       \
    uint64_t r = depth > 0 ? kSteps[next & 7](next, depth - 1) : kLeaves[next & 3](next); \
    pad[7] = r;                                                                           \
    return pad[0] ^ pad[7];                                                               \
  }
OW_STEP(0)
OW_STEP(1)
OW_STEP(2)
OW_STEP(3)
OW_STEP(4)
OW_STEP(5)
OW_STEP(6)
OW_STEP(7)
static const StepFn kSteps[8] = {ow_step_0, ow_step_1, ow_step_2, ow_step_3,
                                 ow_step_4, ow_step_5, ow_step_6, ow_step_7};

// One unit: a descent whose path and depth (24 to 39 frames) depend only on unit % 4096.
NOIPA uint64_t ow_unit(uint64_t unit) {
  uint64_t h = Mix((unit & 4095) + 1);
  return kSteps[h & 7](h, 22 + (int)((h >> 8) & 15));
}

// Seconds on the monotonic clock: what both programs time the units with.
static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif  // EMBER_BENCH_OVERHEAD_UNITS_H_
