/* Uses a library's otel_thread_ctx_v1: linked at start, or dlopened (argv[3]) when built with
 * HELPER_DLOPEN; through the library's function, or (HELPER_EXE_ACCESS) directly. */
#include "helper_run.h"

#ifdef HELPER_DLOPEN
#include <dlfcn.h>
static tls_address_fn resolved;
static void **address(void) { return resolved(); }
#elif defined(HELPER_EXE_ACCESS)
/* The executable reaches the library's variable itself, by initial exec: an
 * R_X86_64_TPOFF64 against the name in the executable's GOT. */
extern __thread void *otel_thread_ctx_v1;
__attribute__((noinline)) static void **address(void) { return &otel_thread_ctx_v1; }
#else
void **tls_ctx_address(void);
static void **address(void) { return tls_ctx_address(); }
#endif

int main(int argc, char **argv) {
#ifdef HELPER_DLOPEN
  if (argc < 4) {
    fprintf(stderr, "usage: %s wait|spin MS library\n", argv[0]);
    return 2;
  }
  void *library = dlopen(argv[3], RTLD_NOW);
  if (library == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  resolved = (tls_address_fn)dlsym(library, "tls_ctx_address");
  if (resolved == NULL) return 1;
#endif
  return helper_run(argc, argv, address);
}
