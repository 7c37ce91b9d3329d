// /proc and /sys text the agent parses but does not control: /proc/PID/maps, /proc/kallsyms,
// /proc/PID/cgroup, /proc/self/mounts, /proc/PID/stat and /proc/PID/status. The first byte picks
// the parser, the rest is its input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/strings/string_view.h"
#include "agent/proc_maps.h"
#include "agent/process_table.h"
#include "k8s/cgroup_resolver.h"
#include "k8s/container_id.h"
#include "symbolize/kallsyms.h"
#include "symbolize/perf_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      auto mappings = ember::ParseProcMaps(text);
      if (mappings.ok()) {
        for (const ember::MemoryMapping& m : *mappings) {
          if (m.start > m.end) __builtin_trap();  // ParseProcMaps refuses reversed ranges
        }
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
