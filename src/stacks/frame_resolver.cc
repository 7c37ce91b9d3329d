// Frame symbolization with a generation-evicted cache of Frames.
#include "stacks/frame_resolver.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace ember {
namespace {

// Heap bytes of a string: none while it fits in the string itself.
size_t HeapBytes(const std::string& text) {
  static const size_t kInline = std::string().capacity();
  return text.capacity() > kInline ? text.capacity() + 1 : 0;
}

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// JIT code lies in anonymous or memfd memory (.NET double-maps it), or where the maps showed no
// executable mapping when last read (V8 flips code pages between writable and executable). Not in
// [vdso], [vsyscall], [heap] or [stack]: no runtime names those.
bool MayHoldJitCode(const MemoryMapping* mapping) {
  if (mapping == nullptr || mapping->path.empty()) return true;
  if (mapping->path[0] == '[') return absl::StartsWith(mapping->path, "[anon");
  return true;
}

}  // namespace

std::optional<size_t> FramesToThreadStart(std::span<const Frame* const> user_frames) {
  for (size_t i = 0; i < user_frames.size(); ++i) {
    if (user_frames[i]->thread_start) return i + 1;
  }
  return std::nullopt;
}

size_t FrameResolver::KeyHash::operator()(const Key& key) const {
  return absl::HashOf(key.file.dev, key.file.inode, key.value, key.name, key.jit_version);
}

FrameResolver::FrameResolver(ProcessTable* processes, ModuleCache* modules,
                             const KernelSymbols* kernel_symbols, size_t max_bytes)
    : processes_(processes),
      modules_(modules),
      kernel_symbols_(kernel_symbols),
      max_bytes_(max_bytes) {}

size_t FrameResolver::EstimatedFrameBytes(const Key& key, const Frame& frame) {
  // A slot of the flat table (the pair and its control byte, at a load of at most 7/8), and the
  // Frame.
  size_t bytes = (sizeof(std::pair<const Key, Entry>) + 1) * 8 / 7 + sizeof(Frame);
  bytes += HeapBytes(key.name) + HeapBytes(frame.function) + HeapBytes(frame.source_file) +
           HeapBytes(frame.module) + HeapBytes(frame.build_id);
  bytes += frame.inlined.capacity() * sizeof(InlineFrame);
  for (const InlineFrame& inlined : frame.inlined) {
    bytes += HeapBytes(inlined.function) + HeapBytes(inlined.source_file);
  }
  return bytes;
}

const Frame* FrameResolver::Lookup(const Key& key) {
  auto it = frames_.find(key);
  if (it == frames_.end()) return nullptr;
  ++stats_.hits;
  Entry& entry = it->second;
  if (entry.generation != generation_) {
    entry.generation = generation_;
    current_bytes_ += entry.bytes;
    // Its module is in use as long as its frames are, though only new addresses open it.
    if (key.file != FileIdentity{}) modules_->MarkUsed(key.file);
  }
  return entry.frame.get();
}

const Frame* FrameResolver::Remember(Key key, Frame frame) {
  ++stats_.misses;
  // Every frame the agent hands out is made here: its names are bounded once, at the source.
  CapFrameNames(frame);
  const size_t bytes = EstimatedFrameBytes(key, frame);
  auto [it, inserted] = frames_.try_emplace(std::move(key));
  Entry& entry = it->second;
  if (!inserted) {  // not reached: callers Lookup first; keeps the accounting right regardless
    bytes_ -= entry.bytes;
    if (entry.generation == generation_) current_bytes_ -= entry.bytes;
  }
  entry.frame = std::make_unique<Frame>(std::move(frame));
  entry.generation = generation_;
  entry.bytes = bytes;
  bytes_ += bytes;
  current_bytes_ += bytes;
  // Only frames of earlier generations may go now; a sweep frees an eighth at least, so that it
  // is not repeated for every new frame.
  if (bytes_ > max_bytes_ && bytes_ > current_bytes_) EvictOlderGenerations(max_bytes_ / 8 * 7);
  return entry.frame.get();
}

void FrameResolver::EvictOlderGenerations(size_t target) {
  std::vector<std::pair<uint64_t, decltype(frames_)::iterator>> old;  // (generation, entry)
  for (auto it = frames_.begin(); it != frames_.end(); ++it) {
    if (it->second.generation < generation_) old.emplace_back(it->second.generation, it);
  }
  std::sort(old.begin(), old.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [generation, it] : old) {
    if (bytes_ <= target) break;
    bytes_ -= it->second.bytes;
    frames_.erase(it);
    ++stats_.evicted;
  }
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
  if (kernel_symbols_ != nullptr && kernel_symbols_->PastKernelImage(address)) {
    ++stats_.kernel_misses_past_image;
  }
  std::optional<KernelSymbol> symbol =
      kernel_symbols_ ? kernel_symbols_->Lookup(address) : std::nullopt;
  if (symbol) {
    frame.function = std::string(symbol->name);
    frame.module =
        symbol->module.empty() ? "[kernel.kallsyms]" : "[" + std::string(symbol->module) + "]";
  } else {
    frame.module = "[kernel.kallsyms]";
    frame.function = absl::StrFormat("[kernel.kallsyms]+0x%x", address);
  }
  return Remember(std::move(key), std::move(frame));
}

size_t FrameResolver::RecentSlot(uint32_t pid, uint64_t address) {
  // A multiplicative hash: its top bits depend on all of the key's, whose low bits differ most.
  // The pid keeps apart the processes of one fork, whose code lies at the same addresses.
  const uint64_t key = address ^ (uint64_t{pid} << 40 | pid);
  return static_cast<size_t>((key * 0x9e3779b97f4a7c15ull) >> (64 - kRecentFrameBits));
}

const Frame* FrameResolver::User(Process* process, uint64_t ip, bool caller) {
  ProcessAddress address{caller ? ip - 1 : ip};
  RecentFrame& recent = recent_[RecentSlot(process->pid, address.value)];
  if (recent.frame != nullptr && recent.generation == generation_ &&
      recent.maps_version == process->maps_version && recent.address == address.value) {
    ++stats_.hits;
    return recent.frame;
  }
  const MemoryMapping* mapping = process->Find(address);
  if (mapping == nullptr && processes_->RefreshMaps(process)) mapping = process->Find(address);
  if (mapping == nullptr || !mapping->IsFileBacked()) {
    if (mapping != nullptr && mapping->path == "[vdso]") {
      if (const Frame* frame = Vdso(process, *mapping, address)) {
        recent = RecentFrame{process->maps_version, address.value, generation_, frame};
        return frame;
      }
    }
    if (runtimes_ != nullptr && MayHoldJitCode(mapping)) {
      if (const Frame* frame = runtimes_->NameCodeOutsideFiles(*process, address, *this)) {
        return frame;
      }
    }
    if (mapping == nullptr) {
      ++failures_.unmapped;
      return Marker("[unknown]");
    }
    // An unreadable [vdso], and code no runtime names: named after the mapping.
    return Marker(mapping->path.empty() ? "[anon]" : mapping->path);
  }

  FileOffset offset = mapping->ToFileOffset(address);
  Key key{.file = mapping->file, .value = offset.value};
  const Frame* frame = Lookup(key);
  if (frame == nullptr)
    frame = Remember(std::move(key), SymbolizeNative(process, *mapping, offset));
  recent = RecentFrame{process->maps_version, address.value, generation_, frame};
  return frame;
}

const Frame* FrameResolver::Vdso(Process* process, const MemoryMapping& mapping,
                                 ProcessAddress address) {
  // Read once per process and mapping, and again after an exec (which may map another image at
  // the same address): two or three pages, which also tell a 32-bit process's image from the
  // 64-bit one (the same bytes are parsed once for every process). A failed read is tried again
  // a few times, no more often than the maps are re-read: the process may have been between
  // exec and its first instruction, or briefly out of reach.
  constexpr int kMaxVdsoReads = 3;
  const auto now = std::chrono::steady_clock::now();
  const bool changed =
      process->vdso_start != mapping.start || process->vdso_execs != process->execs;
  const bool retry = process->vdso == nullptr && process->vdso_reads < kMaxVdsoReads &&
                     now - process->vdso_read_at >= processes_->min_refresh();
  if (changed || retry) {
    constexpr size_t kMaxVdsoBytes = size_t{64} << 10;
    if (changed) process->vdso_reads = 0;
    process->vdso_start = mapping.start;
    process->vdso_execs = process->execs;
    process->vdso_read_at = now;
    ++process->vdso_reads;
    std::optional<std::string> bytes = processes_->ReadMemory(*process, mapping, kMaxVdsoBytes);
    process->vdso = bytes ? vdso_images_.Find(std::move(bytes).value()) : nullptr;
    if (process->vdso == nullptr && process->vdso_reads == 1) ++failures_.vdso_unreadable;
  }
  if (process->vdso == nullptr) return nullptr;
  const VdsoImage& image = *process->vdso;
  const uint64_t offset = address.value - mapping.start + mapping.offset;
  // A file identity no file has (device ~0): no string to build for each lookup. The image's
  // serial, not its build id or a hash: a process that rewrote its vDSO (keeping the build-id
  // note) must not name the frames of the others.
  Key key{.file = {.dev = ~uint64_t{0}, .inode = image.serial()}, .value = offset};
  if (const Frame* frame = Lookup(key)) return frame;
  Frame frame;
  frame.module = "[vdso]";
  frame.build_id = image.build_id();
  frame.address = image.ToElfAddress(offset).value_or(offset);
  if (std::optional<absl::string_view> name = image.Symbolize(offset)) {
    frame.function = std::string(*name);
  } else {
    ++failures_.no_symbol;
    frame.function = absl::StrFormat("[vdso]+0x%x", frame.address);
  }
  return Remember(std::move(key), std::move(frame));
}

const Frame* FrameResolver::Find(uint64_t version, ProcessAddress address) {
  return Lookup(Key{.value = address.value, .jit_version = version});
}

const Frame* FrameResolver::Add(uint64_t version, ProcessAddress address, Frame frame) {
  return Remember(Key{.value = address.value, .jit_version = version}, std::move(frame));
}

bool FrameResolver::NameFrom(const ElfModule& module, FileOffset offset, Frame& frame) {
  frame.build_id = module.build_id();
  std::optional<ElfAddress> elf_address = module.ToElfAddress(offset);
  if (!elf_address.has_value()) return false;
  frame.address = elf_address->value;
  std::optional<SourceSymbol> symbol = module.Symbolize(*elf_address);
  if (!symbol.has_value()) return false;
  frame.function = std::move(symbol->function);
  frame.source_file = std::move(symbol->source_file);
  frame.line = symbol->line;
  frame.inlined = std::move(symbol->inlined);
  frame.kind = symbol->kind;
  frame.thread_start = symbol->thread_start;
  return true;
}

Frame FrameResolver::SymbolizeNative(Process* process, const MemoryMapping& mapping,
                                     FileOffset offset) {
  Frame frame;
  frame.module = mapping.path;
  frame.address = offset.value;
  ElfModule* module = modules_->Get(
      mapping.file, [&] { return processes_->OpenPath(*process, mapping); }, mapping.path);
  if (module == nullptr) ++failures_.unreadable_file;
  if (module != nullptr) NameFrom(*module, offset, frame);
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
  current_bytes_ = 0;
  absl::erase_if(frames_, [this](const auto& item) {
    if (item.second.generation + 2 >= generation_) return false;
    bytes_ -= item.second.bytes;
    return true;
  });
  if (bytes_ > max_bytes_) EvictOlderGenerations(max_bytes_ / 8 * 7);
}

size_t FrameResolver::Rename(const std::vector<FileIdentity>& files) {
  if (files.empty()) return 0;
  const absl::flat_hash_set<FileIdentity, FileIdentityHash> wanted(files.begin(), files.end());
  size_t renamed = 0;
  for (auto& [key, entry] : frames_) {
    if (key.jit_version != 0 || !key.name.empty() || !wanted.contains(key.file)) {
      continue;
    }
    ElfModule* module = modules_->Find(key.file);
    if (module == nullptr) continue;
    Frame named = *entry.frame;
    if (!NameFrom(*module, FileOffset{key.value}, named)) continue;
    CapFrameNames(named);
    *entry.frame = std::move(named);
    const size_t bytes = EstimatedFrameBytes(key, *entry.frame);
    bytes_ = bytes_ - entry.bytes + bytes;
    if (entry.generation == generation_) current_bytes_ = current_bytes_ - entry.bytes + bytes;
    entry.bytes = bytes;
    ++renamed;
  }
  return renamed;
}

void FrameResolver::ReplaceKernelSymbols(const KernelSymbols* kernel_symbols) {
  kernel_symbols_ = kernel_symbols;
  absl::erase_if(frames_, [this](const auto& item) {
    if (item.second.frame->kind != FrameKind::kKernel) return false;
    bytes_ -= item.second.bytes;
    if (item.second.generation == generation_) current_bytes_ -= item.second.bytes;
    return true;
  });
}

}  // namespace ember
