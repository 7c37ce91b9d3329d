// Binaries the agent opens belong to the profiled programs: any bytes at all. The input becomes a
// file that the symbolizer, the CFI unwinder, the CPython detector and the thread-context TLS
// resolution each open and use.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "context/tls_location.h"
#include "runtimes/cpython/interpreter_detect.h"
#include "symbolize/elf_module.h"
#include "unwind/elf_image.h"
#include "unwind/module_cfi.h"

namespace {

// Symbolizes and steps at a few addresses of every kind: segment starts, and arbitrary ones.
void Use(const std::string& path) {
  ember::ElfModuleOptions options;
  options.debug_dir = "/nonexistent";  // only the input itself, no system debug files
  auto module = ember::ElfModule::Open(path, "/fuzz/input", options);
  if (module.ok()) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{0x40}, uint64_t{0x1000}, uint64_t{0x1234}}) {
      if (auto address = (*module)->ToElfAddress(ember::FileOffset{offset})) {
        (*module)->Symbolize(*address);
      }
    }
  }
  auto image = ember::ElfImage::Open(path);
  if (image.ok()) {
    ember::ModuleCfi cfi(*image);
    uint8_t stack[256] = {};
    for (size_t i = 0; i < sizeof(stack); ++i) stack[i] = static_cast<uint8_t>(i * 7);
    ember::FrameRegisters frame;
    ember::StepResult step;
    for (int reg = 0; reg < ember::kCfiRegisterCount; ++reg) frame.Set(reg, 0x7ffd0000 + reg * 8);
    for (uint64_t pc : {uint64_t{0x401000}, uint64_t{0x1000}, uint64_t{0x1130}}) {
      frame.Set(16, pc);
      cfi.Step(frame, 0, /*is_return_address=*/true,
               ember::StackMemory{.start = 0x7ffd0000, .bytes = stack}, step);
    }
  }
  // A supported interpreter is placed in a process as the agent places it, at a mapping of its
  // first page and at one of a later page.
  absl::StatusOr<ember::python::InterpreterInfo> interpreter =
      ember::python::InspectInterpreterElf(path);
  if (interpreter.ok()) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{0x1000}}) {
      ember::python::MakeProcessInterpreter(*interpreter, {.start = 0x7f0000000000 + offset,
                                                           .end = 0x7f0000100000 + offset,
                                                           .file_offset = offset,
                                                           .executable = offset != 0});
    }
  }
  // otel_thread_ctx_v1 resolved in a process that maps the file as a library from its first
  // segment, whose GOT slots read as a pattern (or not at all).
  absl::StatusOr<ember::context::TlsFileInfo> tls = ember::context::InspectTlsFile(path);
  if (tls.ok() && (tls->defines || !tls->relocations.empty())) {
    class PatternMemory : public ember::MemoryReader {
     public:
      bool Read(uint64_t address, void* out, size_t size) override {
        if ((address >> 40) != 0x7f) return false;
        auto* bytes = static_cast<uint8_t*>(out);
        for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>((address + i) * 13);
        return true;
      }
    } memory;
    // The fuzzer's own process, whose root holds the file.
    ember::Process process;
    process.pid = static_cast<uint32_t>(getpid());
    process.proc_dir = "/proc/self";
    process.executable_path = "/nonexistent/exe";
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return;
    for (const ember::LoadSegment& segment : tls->segments) {
      ember::MemoryMapping mapping;
      mapping.start = 0x7f0000000000 + (segment.vaddr & 0xfffffff000);
      mapping.end = mapping.start + 0x1000;
      mapping.offset = segment.offset & ~uint64_t{0xfff};
      mapping.executable = mapping.readable = true;
      mapping.file = {st.st_dev, st.st_ino};
      mapping.path = path;
      process.mappings.push_back(mapping);
      break;
    }
    if (!process.mappings.empty()) (void)ember::context::FindThreadContextTls(process, memory);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A file by a plain path: the agent refuses /proc magic links (OpenUntrusted), so a memfd's
  // /proc/self/fd path would be refused before any parser saw the input.
  static const std::string path = "/tmp/ember-elf-fuzz-" + std::to_string(getpid());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  size_t written = 0;
  while (written < size) {
    ssize_t n = write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(fd);
  Use(path);
  unlink(path.c_str());
  return 0;
}
