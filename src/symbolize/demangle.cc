// Demangle(): GNU libiberty's C++ and Rust demanglers behind an output budget.
#include "symbolize/demangle.h"

#include <atomic>
#include <csetjmp>
#include <cstring>

// libiberty.h declares basename() unless told that the C library already does (with a signature
// that conflicts with glibc's C++ overloads of it).
#define HAVE_DECL_BASENAME 1
#include <libiberty/demangle.h>

namespace ember {
namespace {

std::atomic<uint64_t> over_budget{0};

// What the demangler has written so far. Plain data: it is left by longjmp (below).
struct Sink {
  char text[kDemangleBudget];
  size_t size;
  bool over_budget;
  std::jmp_buf stop;
};

void Append(const char* piece, size_t len, void* opaque) {
  if (len == 0) return;  // the Rust demangler passes empty pieces as (nullptr, 0)
  auto* sink = static_cast<Sink*>(opaque);
  if (len > kDemangleBudget - sink->size) {
    sink->over_budget = true;
    // Leaving the demangler here, in the middle of printing, is safe: its callback interface
    // keeps every piece of state on the stack (the parse tree and substitution table in
    // variable-length arrays of d_demangle_callback, the printer's scopes and templates in those
    // of cplus_demangle_print_callback, the Rust demangler's state in a local struct) and holds
    // no lock and no heap block; only the non-callback entry points use malloc. So abandoning
    // those frames leaks nothing. The frames skipped between the setjmp in RunDemangler and here
    // are libiberty's C frames and this function's: none has a destructor to run, which is what
    // C++ asks of a longjmp ([csetjmp.syn]).
    std::longjmp(sink->stop, 1);
  }
  std::memcpy(sink->text + sink->size, piece, len);
  sink->size += len;
}

bool IsRustCandidate(std::string_view name) {
  // v0 names start with _R; legacy ones are Itanium-mangled paths whose last part is the hash,
  // "17h" and 16 hex digits, which rust_demangle_callback checks.
  return name.starts_with("_R") || (name.starts_with("_ZN") && name.ends_with("E") &&
                                    name.find("17h") != std::string_view::npos);
}

// Runs the demanglers on `mangled` into `sink`; true when one of them understood it (and, unless
// sink->over_budget, wrote all of it). Only plain data lives in this frame across the setjmp.
bool RunDemangler(const char* mangled, bool rust, Sink* sink) {
  // Without DMGL_NO_RECURSE_LIMIT: libiberty's recursion limits are what keep a hostile name
  // from exhausting the stack (a 51-byte Rust name whose back-reference refers to itself
  // recurses without end past them), at the price of leaving mangled names over 1 KiB mangled.
  constexpr int kOptions = DMGL_PARAMS | DMGL_ANSI;
  sink->size = 0;
  sink->over_budget = false;
  if (setjmp(sink->stop) != 0) return true;  // stopped by Append: over the budget
  if (rust && rust_demangle_callback(mangled, kOptions, Append, sink) != 0) return true;
  sink->size = 0;  // a failed Rust attempt may have written part of a name
  return cplus_demangle_v3_callback(mangled, kOptions, Append, sink) != 0;
}

}  // namespace

uint64_t DemangleOverBudget() { return over_budget.load(std::memory_order_relaxed); }

std::string Demangle(std::string_view name) {
  // Only mangled names start with _Z or _R; skipping the rest avoids turning a plain C name like
  // "f" into "float" (a valid mangled <type>).
  const bool itanium = name.size() >= 3 && name.starts_with("_Z");
  const bool rust = IsRustCandidate(name);
  if (!itanium && !(rust && name.size() >= 3)) return std::string(name);
  // libiberty refuses names over 1 KiB itself; this only spares the copy of a longer one.
  if (name.size() > kDemangleBudget) return std::string(name);
  std::string mangled(name);  // NUL-terminated
  // Static: 4 KiB of stack in every symbolizing thread is avoidable, and the agent symbolizes on
  // one thread; thread_local keeps tests and other callers apart.
  static thread_local Sink sink;
  if (!RunDemangler(mangled.c_str(), rust, &sink)) return mangled;
  if (sink.over_budget) {
    over_budget.fetch_add(1, std::memory_order_relaxed);
    return mangled;
  }
  return std::string(sink.text, sink.size);
}

}  // namespace ember
