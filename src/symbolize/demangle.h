// C++ symbol demangling for native frames.
#pragma once

#include <string>
#include <string_view>

namespace ember {

// Demangles an Itanium C++ ABI name with abi::__cxa_demangle. Returns the input unchanged when it
// is not mangled or demangling fails, so callers can always use the result as a display name.
std::string Demangle(std::string_view name);

}  // namespace ember
