// Frame symbolization with a generation-evicted cache of Frames.
#include "agent/frame_resolver.h"

#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace ember {
namespace {

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// JIT code lies in anonymous or memfd memory (.NET double-maps it), or where the maps showed no
// executable mapping when last read (V8 flips code pages between writable and executable). Not in
// [vdso], [vsyscall], [heap] or [stack]: no perf map names those.
bool MayHoldJitCode(const MemoryMapping* mapping) {
  if (mapping == nullptr || mapping->path.empty()) return true;
  if (mapping->path[0] == '[') return absl::StartsWith(mapping->path, "[anon");
  return true;
}

}  // namespace

size_t FrameResolver::KeyHash::operator()(const Key& key) const {
  return absl::HashOf(key.file.dev, key.file.inode, key.value, key.name, key.jit_version);
}

FrameResolver::FrameResolver(ProcessTable* processes, ModuleCache* modules,
                             const KernelSymbols* kernel_symbols)
    : processes_(processes), modules_(modules), kernel_symbols_(kernel_symbols) {}

const Frame* FrameResolver::Lookup(const Key& key) {
  auto it = frames_.find(key);
  if (it == frames_.end()) return nullptr;
  it->second.generation = generation_;
  return it->second.frame.get();
}

const Frame* FrameResolver::Remember(Key key, Frame frame) {
  Entry& entry = frames_[std::move(key)];
  entry.frame = std::make_unique<Frame>(std::move(frame));
  entry.generation = generation_;
  return entry.frame.get();
}

const Frame* FrameResolver::Marker(absl::string_view name) {
  Key key{.name = std::string(name)};
  if (const Frame* frame = Lookup(key)) return frame;
  Frame frame;
  frame.function = std::string(name);
  frame.module = std::string(name);
  return Remember(std::move(key), std::move(frame));
}

const Frame* FrameResolver::Kernel(uint64_t ip, bool caller) {
  uint64_t address = caller ? ip - 1 : ip;
  Key key{.value = address};
  if (const Frame* frame = Lookup(key)) return frame;
  Frame frame;
  frame.kind = FrameKind::kKernel;
  frame.address = address;
  const KernelSymbol* symbol = kernel_symbols_ ? kernel_symbols_->Lookup(address) : nullptr;
  if (symbol != nullptr) {
    frame.function = symbol->name;
    frame.module = symbol->module.empty() ? "[kernel.kallsyms]" : "[" + symbol->module + "]";
  } else {
    frame.module = "[kernel.kallsyms]";
    frame.function = absl::StrFormat("[kernel.kallsyms]+0x%x", address);
  }
  return Remember(std::move(key), std::move(frame));
}

const Frame* FrameResolver::User(Process* process, uint64_t ip, bool caller) {
  ProcessAddress address{caller ? ip - 1 : ip};
  const MemoryMapping* mapping = process->Find(address);
  if (mapping == nullptr && processes_->RefreshMaps(process)) mapping = process->Find(address);
  if (mapping == nullptr || !mapping->IsFileBacked()) {
    if (MayHoldJitCode(mapping)) {
      if (const Frame* frame = Jit(process, address)) return frame;
    }
    if (mapping == nullptr) {
      ++failures_.unmapped;
      return Marker("[unknown]");
    }
    // [vdso], and code no perf map names: named after the mapping.
    return Marker(mapping->path.empty() ? "[anon]" : mapping->path);
  }

  FileOffset offset = mapping->ToFileOffset(address);
  Key key{.file = mapping->file, .value = offset.value};
  if (const Frame* frame = Lookup(key)) return frame;
  return Remember(std::move(key), SymbolizeNative(process, *mapping, offset));
}

const Frame* FrameResolver::Jit(Process* process, ProcessAddress address) {
  for (bool refreshed = false;; refreshed = true) {
    if (process->perf_map != nullptr) {
      const PerfMap& map = process->perf_map->map();
      Key key{.value = address.value, .jit_version = map.version()};
      if (const Frame* frame = Lookup(key)) return frame;
      if (std::optional<PerfMapSymbol> symbol = map.Lookup(address.value)) {
        Frame frame;
        frame.kind = process->jit_kind;
        frame.function = std::string(symbol->name);
        frame.module = process->perf_map->name();
        frame.address = address.value;
        return Remember(std::move(key), std::move(frame));
      }
    }
    // Not (yet) named: the runtime may have appended it since the last read.
    if (refreshed || !processes_->RefreshPerfMap(process)) return nullptr;
  }
}

Frame FrameResolver::SymbolizeNative(Process* process, const MemoryMapping& mapping,
                                     FileOffset offset) {
  Frame frame;
  frame.module = mapping.path;
  frame.address = offset.value;
  ElfModule* module =
      modules_->Get(mapping.file, processes_->OpenPath(*process, mapping), mapping.path);
  if (module == nullptr) ++failures_.unreadable_file;
  if (module != nullptr) {
    frame.build_id = module->build_id();
    if (std::optional<ElfAddress> elf_address = module->ToElfAddress(offset)) {
      frame.address = elf_address->value;
      if (std::optional<SourceSymbol> symbol = module->Symbolize(*elf_address)) {
        frame.function = std::move(symbol->function);
        frame.source_file = std::move(symbol->source_file);
        frame.line = symbol->line;
        frame.inlined = std::move(symbol->inlined);
      }
    }
  }
  // Never drop a frame we cannot name: keep where it is.
  if (frame.function.empty() && module != nullptr) {
    ++(module->file_changed() ? failures_.file_changed : failures_.no_symbol);
  }
  if (frame.function.empty()) {
    frame.function = absl::StrFormat("%s+0x%x", Basename(mapping.path), frame.address);
  }
  return frame;
}

void FrameResolver::NextGeneration() {
  ++generation_;
  std::erase_if(frames_,
                [this](const auto& item) { return item.second.generation + 2 < generation_; });
}

}  // namespace ember
