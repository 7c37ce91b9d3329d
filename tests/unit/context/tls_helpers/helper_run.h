/* The behaviour every TLS helper shares: print where the calling thread's otel_thread_ctx_v1
 * lives (its fs base and the variable's address), then wait for stdin to close ("wait"), or run
 * busy for a while with a known thread-context record on the main thread, none on a second thread
 * and a third thread that never touches the variable ("spin MS"). Every run ends by itself within a
 * minute. */
#ifndef EMBER_TLS_HELPER_RUN_H_
#define EMBER_TLS_HELPER_RUN_H_

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* asm/prctl.h's, which musl-gcc's headers lack. */
#define HELPER_ARCH_GET_FS 0x1003

typedef void **(*tls_address_fn)(void);

/* An OTEP 4947 record: header and two attributes (key 0 "/checkout", key 1 "GET"). */
struct __attribute__((packed, aligned(2))) helper_record {
  uint8_t trace_id[16];
  uint8_t span_id[8];
  uint8_t valid;
  uint8_t trace_flags;
  uint16_t attrs_data_size;
  uint8_t attrs[16];
};

static struct helper_record helper_record_value = {
    .trace_id = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
    .span_id = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8},
    .valid = 1,
    .trace_flags = 1,
    .attrs_data_size = 16,
    .attrs = {0, 9, '/', 'c', 'h', 'e', 'c', 'k', 'o', 'u', 't', 1, 3, 'G', 'E', 'T'},
};

static double helper_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static volatile uint64_t helper_sink;

static void helper_spin(double seconds) {
  const double end = helper_now() + seconds;
  while (helper_now() < end) {
    for (int i = 0; i < 100000; ++i) helper_sink += i;
  }
}

struct helper_spin_args {
  tls_address_fn address;
  double seconds;
};

static void *helper_spin_without_record(void *arg) {
  struct helper_spin_args *args = arg;
  *args->address() = NULL;
  helper_spin(args->seconds);
  return NULL;
}

static volatile long helper_untouched_tid;

/* Never touches the variable: with a dlopened module's dynamic TLS its block is never allocated
 * (glibc's DTV holds -1 for it); with static TLS its pointer is the initial NULL. */
static void *helper_spin_untouched(void *arg) {
  struct helper_spin_args *args = arg;
  helper_untouched_tid = syscall(SYS_gettid);
  helper_spin(args->seconds);
  return NULL;
}

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

static char **helper_argv;

/* For each line on stdin: execs itself anew for "exec"; else names a mapping "OTHER_NAME", then
 * "OTEL_CTX", as a process re-publishing its process context does (OTEP 4719). Either may fail (a
 * kernel without CONFIG_ANON_VMA_NAME); the call was made all the same. Prints "published N" after
 * each. */
static void *helper_publish_on_request(void *arg) {
  static char page[4096] __attribute__((aligned(4096)));
  char buffer[64];
  int published = 0;
  while (fgets(buffer, sizeof(buffer), stdin) != NULL) {
    if (strncmp(buffer, "exec", 4) == 0) {
      /* The same program again: the same TLS layout, a new image. */
      execv("/proc/self/exe", helper_argv);
      return arg;
    }
    prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)page, sizeof(page), "OTHER_NAME");
    prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)page, sizeof(page), "OTEL_CTX");
    printf("published %d\n", ++published);
    fflush(stdout);
  }
  return arg;
}

static int helper_run(int argc, char **argv, tls_address_fn address) {
  alarm(60);
  helper_argv = argv;
  if (argc < 2) {
    fprintf(stderr, "usage: %s wait|spin MS [library]\n", argv[0]);
    return 2;
  }
  unsigned long fs = 0;
  if (syscall(SYS_arch_prctl, HELPER_ARCH_GET_FS, &fs) != 0) return 1;
  void **slot = address();
  printf("fs=0x%lx addr=0x%lx end\n", fs, (unsigned long)slot);
  fflush(stdout);
  if (strcmp(argv[1], "wait") == 0) {
    char buffer[64];
    while (read(0, buffer, sizeof(buffer)) > 0) {
    }
    return 0;
  }
  if (strcmp(argv[1], "spin") == 0 && argc >= 3) {
    struct helper_spin_args args = {address, atoi(argv[2]) / 1000.0};
    pthread_t other, untouched, publisher;
    if (pthread_create(&other, NULL, helper_spin_without_record, &args) != 0) return 1;
    if (pthread_create(&untouched, NULL, helper_spin_untouched, &args) != 0) return 1;
    if (pthread_create(&publisher, NULL, helper_publish_on_request, NULL) != 0) return 1;
    pthread_detach(publisher);
    *slot = &helper_record_value;
    while (helper_untouched_tid == 0) usleep(1000);
    printf("untouched=%ld ready\n", helper_untouched_tid);
    fflush(stdout);
    helper_spin(args.seconds);
    pthread_join(other, NULL);
    pthread_join(untouched, NULL);
    return 0;
  }
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}

#endif /* EMBER_TLS_HELPER_RUN_H_ */
