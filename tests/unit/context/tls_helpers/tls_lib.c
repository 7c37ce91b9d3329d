/* otel_thread_ctx_v1 defined in a shared library, behind other TLS of its own; built with each
 * TLS dialect and model the tests cover. With HELPER_DEFINE_ONLY the library never reaches it
 * itself (no relocation of its own): only the executable does (tls_user.c, HELPER_EXE_ACCESS). */
__thread char helper_lib_padding[40] = {1};
#ifdef HELPER_LOCAL_DYNAMIC
/* The library reaches the variable through a local alias: only its own module id is relocated
 * (R_X86_64_DTPMOD64 without a symbol), the exported name has no relocation. */
static __thread void *local_ctx;
extern __thread void *otel_thread_ctx_v1 __attribute__((alias("local_ctx")));
#define HELPER_CTX local_ctx
#else
__thread void *otel_thread_ctx_v1;
#define HELPER_CTX otel_thread_ctx_v1
#endif

#ifndef HELPER_DEFINE_ONLY
void **tls_ctx_address(void) {
  helper_lib_padding[1] = 2;
  return &HELPER_CTX;
}
#endif
