// Symbol names come from the profiled programs' files: any bytes. Demangling must end quickly
// with a name no longer than the budget (or the input itself, kept mangled), whatever the
// back-references expand to.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/names.h"
#include "symbolize/demangle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  std::string out = ember::Demangle(name);
  if (out != name && out.size() > ember::kDemangleBudget) __builtin_trap();
  if (!name.starts_with("_Z") && !name.starts_with("_R") && out != name) __builtin_trap();
  ember::CutName(out);
  if (out.size() > ember::kMaxNameBytes) __builtin_trap();
  return 0;
}
