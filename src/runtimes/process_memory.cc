// process_vm_readv, the one syscall of the runtimes' memory reads.
#include "runtimes/process_memory.h"

#include <sys/uio.h>

namespace ember {

bool ProcessMemoryReader::Read(uint64_t address, void* out, size_t size) {
  if (size == 0) return true;
  struct iovec local = {out, size};
  struct iovec remote = {reinterpret_cast<void*>(address), size};
  ssize_t n = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
  return n == static_cast<ssize_t>(size);
}

}  // namespace ember
