// /proc and /sys text the agent parses but does not control: /proc/PID/maps, /proc/kallsyms,
// /proc/PID/cgroup, /proc/self/mounts, /proc/PID/stat and /proc/PID/status. The first byte picks
// the parser, the rest is its input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "k8s/cgroup_resolver.h"
#include "k8s/container_id.h"
#include "process/proc_maps.h"
#include "process/process_table.h"
#include "symbolize/kallsyms.h"
#include "symbolize/perf_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      ember::ProcMapsStats stats;
      auto mappings = ember::ParseProcMaps(text, /*max_path_bytes=*/64, &stats);
      if (mappings.ok()) {
        for (const ember::MemoryMapping& m : *mappings) {
          if (m.start > m.end) __builtin_trap();  // ParseProcMaps refuses reversed ranges
          if (m.path.size() > 64) __builtin_trap();
        }
        // With the parsed paths as the program's, so that every rank is reached.
        const std::string program = mappings->empty() ? "" : mappings->front().path;
        std::vector<ember::MemoryMapping> kept =
            ember::KeepExecutableMappings(std::move(mappings).value(), program, 4, &stats);
        if (kept.size() > 4) __builtin_trap();
        for (size_t i = 1; i < kept.size(); ++i) {
          if (kept[i - 1].start > kept[i].start) __builtin_trap();  // still in address order
        }
        ember::MappingsBytes(kept);
      }
      break;
    }
    case 1: {
      auto symbols = ember::KernelSymbols::Parse(std::string_view(text.data(), text.size()));
      if (symbols.ok()) {
        symbols->Lookup(0);
        symbols->Lookup(0xffffffff81000000ull);
        symbols->Lookup(~0ull);
      }
      break;
    }
    case 2:
      ember::ContainerFromProcCgroup(text);
      ember::ContainerIdFromCgroupPath(text);
      ember::UnifiedCgroupPath(text);
      ember::HasCgroupV1Lines(text);
      break;
    case 3:
      ember::UnifiedCgroupMount(text);
      break;
    case 4:
      ember::ParseStatStartTime(text);
      break;
    case 5:
      ember::NamespacePid(text, 1234);
      break;
  }
  return 0;
}
