/* otel_thread_ctx_v1 defined in the executable, after a TLS variable of a larger alignment so
 * that the block's size and alignment both matter. */
#include "helper_run.h"

_Alignas(64) __thread char helper_tls_padding[72];
__thread void *otel_thread_ctx_v1;

__attribute__((noinline)) static void **address(void) {
  helper_tls_padding[0] = 1;
  return &otel_thread_ctx_v1;
}

int main(int argc, char **argv) { return helper_run(argc, argv, address); }
