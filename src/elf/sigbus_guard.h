// Reads of a file through mmap fault with SIGBUS where the file was truncated after it was mapped
// (a library replaced in place, or cut short, under the process that runs it). The symbolizer,
// the unwinder and interpreter detection read ELF, symbols and DWARF straight from such mappings,
// so they run those reads under this guard.
#pragma once

#include "absl/functional/function_ref.h"

namespace ember::internal {

// Runs `read` on this thread with SIGBUS turned into a `false` return instead of the end of the
// agent. After a fault, `read` was cut short at an arbitrary point: whatever it was working on
// (libelf or libdw handles, partly filled caches) must never be used or destroyed again, only
// leaked, and `read` must not own anything that needs destroying (the jump skips destructors).
// SIGBUS outside a guarded read keeps its usual action (the handler before ours, or the default).
bool RunCatchingSigbus(absl::FunctionRef<void()> read);

// Keeps an object a faulted read left behind reachable for good, never freed (so that leak
// checkers see it is meant).
void KeepAbandoned(const void* object);

}  // namespace ember::internal
