// What tests need to know of an ELF file's layout on disk.
#pragma once

#include <cstdint>
#include <string>

namespace ember::testing {

// The end of the last PT_LOAD segment's bytes in the file, rounded up to a page: all a process
// needs of a library to run it (a file cut there still loads; its symbols and DWARF are gone).
uint64_t LoadedEnd(const std::string& path);

}  // namespace ember::testing
