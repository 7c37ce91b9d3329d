// ModuleCache: the generation-evicted, bounded cache of ElfModules shared by all processes.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "common/log_safe.h"
#include "symbolize/elf_module.h"

namespace ember {
namespace {

// One warning per unreadable file: a workload mapping many of them must not flood the log.
LogRateLimiter& Warnings() {
  static LogRateLimiter limiter(kLogLinesPerMinute, std::chrono::minutes(1));
  return limiter;
}

}  // namespace

size_t FileIdentityHash::operator()(const FileIdentity& id) const {
  // splitmix64 finalizer over both fields: inodes on one device are dense small integers.
  uint64_t x = id.dev * 0x9e3779b97f4a7c15ULL ^ id.inode;
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<size_t>(x);
}

ModuleCache::ModuleCache(size_t max_modules, ElfModuleOptions options, size_t max_bytes)
    : max_modules_(max_modules), max_bytes_(max_bytes), options_(std::move(options)) {}

ModuleCache::~ModuleCache() = default;

size_t ModuleCache::BytesOf(const Entry& entry) {
  return entry.module != nullptr ? entry.module->EstimatedBytes() : kFailedEntryBytes;
}

size_t ModuleCache::bytes() const {
  return last_ != nullptr ? bytes_ - last_->bytes + BytesOf(*last_) : bytes_;
}

void ModuleCache::Reaccount() {
  if (last_ == nullptr) return;
  bytes_ -= last_->bytes;
  last_->bytes = BytesOf(*last_);
  bytes_ += last_->bytes;
}

ElfModule* ModuleCache::Get(const FileIdentity& id, const FileLocation& location,
                            const std::string& display_path) {
  return Get(
      id, [&location] { return location; }, display_path);
}

ElfModule* ModuleCache::Get(const FileIdentity& id, absl::FunctionRef<FileLocation()> location,
                            const std::string& display_path) {
  Reaccount();
  auto [it, inserted] = entries_.try_emplace(id);
  FileLocation path;
  if (inserted) {
    path = location();
    if (path.empty()) {
      entries_.erase(it);
      ++stats_.unreachable;
      return nullptr;
    }
  }
  Entry& entry = it->second;
  entry.last_generation = generation_;
  entry.last_use = ++tick_;
  last_ = &entry;
  if (inserted) {
    ++stats_.misses;
    absl::StatusOr<std::unique_ptr<ElfModule>> module =
        ElfModule::Open(path, display_path, options_);
    if (module.ok()) {
      entry.module = std::move(*module);
    } else {
      LogLimited(Warnings(), spdlog::level::warn, "cannot symbolize {}: {}", LogSafe(display_path),
                 LogSafe(module.status().ToString()));
    }
    entry.bytes = BytesOf(entry);
    bytes_ += entry.bytes;
  } else {
    ++stats_.hits;
  }
  if (entries_.size() > max_modules_ || bytes_ > max_bytes_) {
    // Down to seven eighths, so that a cache at its limit does not sort on every new module.
    EvictLeastRecentlyUsed(max_modules_, max_bytes_ / 8 * 7, &entry);
  }
  return entry.module.get();
}

void ModuleCache::MarkUsed(const FileIdentity& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.last_generation = generation_;
  it->second.last_use = ++tick_;
}

ElfModule* ModuleCache::Find(const FileIdentity& id) {
  Reaccount();
  auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  Entry& entry = it->second;
  entry.last_generation = generation_;
  entry.last_use = ++tick_;
  last_ = &entry;
  return entry.module.get();
}

std::vector<FileIdentity> ModuleCache::DebugFileArrived(const std::string& build_id) {
  Reaccount();
  std::vector<FileIdentity> reloaded;
  for (auto& [id, entry] : entries_) {
    if (entry.module == nullptr || !entry.module->awaiting_debug_file() ||
        entry.module->build_id() != build_id) {
      continue;
    }
    entry.module->ReloadSymbols();
    bytes_ -= entry.bytes;
    entry.bytes = BytesOf(entry);
    bytes_ += entry.bytes;
    reloaded.push_back(id);
  }
  return reloaded;
}

std::vector<std::string> ModuleCache::AwaitedBuildIds() const {
  std::vector<std::string> build_ids;
  for (const auto& [id, entry] : entries_) {
    if (entry.module != nullptr && entry.module->awaiting_debug_file()) {
      build_ids.push_back(entry.module->build_id());
    }
  }
  return build_ids;
}

void ModuleCache::EvictLeastRecentlyUsed(size_t max_entries, size_t max_bytes, const Entry* keep) {
  std::vector<std::pair<uint64_t, Map::iterator>> by_use;  // (last_use, entry)
  by_use.reserve(entries_.size());
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (&it->second != keep) by_use.emplace_back(it->second.last_use, it);
  }
  std::sort(by_use.begin(), by_use.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [last_use, it] : by_use) {
    if (entries_.size() <= max_entries && bytes_ <= max_bytes) break;
    if (&it->second == last_) last_ = nullptr;
    bytes_ -= it->second.bytes;
    entries_.erase(it);
    ++stats_.evicted;
  }
}

void ModuleCache::NextGeneration(int keep_generations) {
  Reaccount();
  last_ = nullptr;
  ++generation_;
  uint64_t keep = keep_generations > 0 ? static_cast<uint64_t>(keep_generations) : 0;
  // Entries used in any of the last `keep` generations (the one just finished included) stay.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (generation_ - it->second.last_generation > keep) {
      bytes_ -= it->second.bytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  if (entries_.size() > max_modules_ || bytes_ > max_bytes_) {
    EvictLeastRecentlyUsed(max_modules_, max_bytes_, nullptr);
  }
}

void ModuleCache::ReleasePages(internal::FileMappingCheck& file_mappings) const {
  for (const auto& [id, entry] : entries_) {
    if (entry.module != nullptr) entry.module->ReleasePages(file_mappings);
  }
}

}  // namespace ember
