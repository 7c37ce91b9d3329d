// Demangle(): a thin wrapper over the C++ runtime's demangler.
#include "symbolize/demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace ember {

std::string Demangle(std::string_view name) {
  // Only Itanium-mangled names start with _Z; skipping the rest avoids turning a plain C name
  // like "f" into "float" (a valid mangled <type>).
  if (name.size() < 3 || name[0] != '_' || name[1] != 'Z') return std::string(name);
  std::string mangled(name);  // __cxa_demangle needs a NUL-terminated string.
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || out == nullptr) return mangled;
  return std::string(out.get());
}

}  // namespace ember
