// Reading another process's memory: the interface the runtimes' walkers and namers read through
// (a test can stand in) and its process_vm_readv implementation.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace ember {

class MemoryReader {
 public:
  virtual ~MemoryReader() = default;
  // Copies `size` bytes at `address`; false when any of them cannot be read. Never throws, never
  // logs: it runs per frame.
  virtual bool Read(uint64_t address, void* out, size_t size) = 0;
};

// process_vm_readv on one process: needs ptrace-read access (same user without yama restrictions,
// or CAP_SYS_PTRACE), exactly like the agent's reads of /proc/PID/mem.
class ProcessMemoryReader : public MemoryReader {
 public:
  explicit ProcessMemoryReader(pid_t pid) : pid_(pid) {}
  bool Read(uint64_t address, void* out, size_t size) override;

 private:
  pid_t pid_;
};

}  // namespace ember
