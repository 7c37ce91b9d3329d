// Symbol demangling for native frames: C++ (Itanium ABI) and Rust (legacy and v0), with an output
// budget, as the names come from files the workload controls.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/names.h"

namespace ember {

// The most bytes a demangled name may have. A few hundred bytes of mangled name can demangle to
// hundreds of megabytes (back-references that each double the text): past this budget the
// demangler is stopped at once, having written only this much.
inline constexpr size_t kDemangleBudget = kMaxNameBytes;

// Demangles `name` with GNU libiberty's demangler (as binutils and gdb do), through its callback
// interface, which allocates nothing on the heap. Rust names lose their "::h<hash>" suffix
// (legacy) as rustfilt shows them. Returns:
// - the demangled name when it fits in kDemangleBudget bytes;
// - when it would not, `name` itself, still mangled, counted in DemangleOverBudget(): a prefix
//   of the demangled text could name two different functions alike;
// - `name` unchanged when it is not mangled or does not demangle. libiberty, as binutils, also
//   leaves mangled names over 1 KiB alone (their parse tree would not fit its stack budget), so a
//   name kept mangled is never longer than that, let alone kMaxNameBytes.
std::string Demangle(std::string_view name);

// Names whose demangled form exceeded kDemangleBudget, since the process started.
uint64_t DemangleOverBudget();

}  // namespace ember
