// ModuleCache: the generation-evicted, bounded cache of ElfModules shared by all processes.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "symbolize/elf_module.h"

namespace ember {

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

ModuleCache::ModuleCache(size_t max_modules, ElfModuleOptions options)
    : max_modules_(max_modules), options_(std::move(options)) {}

ModuleCache::~ModuleCache() = default;

ElfModule* ModuleCache::Get(const FileIdentity& id, const std::string& open_path,
                            const std::string& display_path) {
  auto [it, inserted] = entries_.try_emplace(id);
  Entry& entry = it->second;
  entry.last_generation = generation_;
  entry.last_use = ++tick_;
  if (inserted) {
    absl::StatusOr<std::unique_ptr<ElfModule>> module =
        ElfModule::Open(open_path, display_path, options_);
    if (module.ok()) {
      entry.module = std::move(*module);
    } else {
      spdlog::warn("cannot symbolize {}: {}", display_path, module.status().ToString());
    }
  }
  return entry.module.get();
}

void ModuleCache::NextGeneration(int keep_generations) {
  ++generation_;
  uint64_t keep = keep_generations > 0 ? static_cast<uint64_t>(keep_generations) : 0;
  // Entries used in any of the last `keep` generations (the one just finished included) stay.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (generation_ - it->second.last_generation > keep) {
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  if (entries_.size() <= max_modules_) return;
  std::vector<std::pair<uint64_t, FileIdentity>> by_use;
  by_use.reserve(entries_.size());
  for (const auto& [id, entry] : entries_) by_use.emplace_back(entry.last_use, id);
  size_t excess = entries_.size() - max_modules_;
  std::nth_element(by_use.begin(), by_use.begin() + static_cast<ptrdiff_t>(excess), by_use.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < excess; ++i) entries_.erase(by_use[i].second);
}

}  // namespace ember
