// A process's [vdso] mapping is its own memory: it may have written anything there before the
// agent reads it. The bytes are parsed as a vDSO image; every name found must lie in its symbol's
// range, and an image is found again by its bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "symbolize/vdso.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  ember::VdsoImages images(2);
  std::shared_ptr<const ember::VdsoImage> image = images.Find(bytes);
  if (image == nullptr) return 0;
  if (images.Find(bytes) != image) __builtin_trap();
  for (uint64_t offset = 0; offset < size + 64; offset += 7) {
    if (auto name = image->Symbolize(offset)) {
      if (name->empty() || !image->ToElfAddress(offset)) __builtin_trap();
    }
  }
  return 0;
}
