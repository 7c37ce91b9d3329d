/* The OTEP's name on a variable that is not thread-local: a reader must refuse it. */
void *otel_thread_ctx_v1;
