// When a sampled process is read again, and when the BPF side is told it is known.
#include "sampler/known_processes.h"

#include <cstring>
#include <utility>

#include "absl/strings/string_view.h"
#include "common/address.h"

namespace ember {

KnownProcesses::KnownProcesses(ProcessTable& table, std::function<void(uint32_t pid)> mark,
                               std::function<void(uint32_t pid)> forget)
    : table_(table), mark_(std::move(mark)), forget_(std::move(forget)) {
  table_.Subscribe(this);
}

Process* KnownProcesses::OnSample(const SampleView& sample) {
  const ember_sample& header = *sample.header;
  Process* process = table_.Get(header.pid);
  if (process == nullptr) {
    // Gone before its maps could be read: its samples need not wake the agent.
    if (!sample.user_ips.empty() || !sample.user_regs.empty()) mark_(header.pid);
    return nullptr;
  }
  // The main thread renamed: an exec, or a reused pid. Its old maps would misname its frames
  // and stop its unwinding. Reloading sets the name, so this happens once per rename.
  const absl::string_view thread(header.comm, strnlen(header.comm, sizeof(header.comm)));
  bool renamed = false;
  if (header.tid == header.pid && thread != process->name) {
    table_.ReloadAfterExec(process);
    renamed = true;
  }
  auto [it, first_sample] = marks_.try_emplace(header.pid);
  if (first_sample) {
    it->second.settle_from_ns = header.timestamp_ns;
  } else {
    MarkKnownOnceSettled(process, it->second, sample, renamed);
  }
  table_.Publish(process);
  return process;
}

void KnownProcesses::MarkKnownOnceSettled(Process* process, Mark& mark, const SampleView& sample,
                                          bool renamed) {
  const ember_sample& header = *sample.header;
  if (renamed) {
    // A new program (its maps were just read again): its loader maps its libraries now, so it
    // settles again.
    mark.marked = false;
    mark.settle_from_ns = header.timestamp_ns;
    return;
  }
  // Marked, yet unknown to the BPF side in a sample taken after the mark: the process exec'd
  // (which clears the mark there), or the mark was evicted. Its maps are another program's.
  if (mark.marked && (header.flags & EMBER_SAMPLE_PROCESS_UNKNOWN) &&
      polls_ >= mark.marked_in_poll + 2) {
    table_.ReloadAfterExec(process);
    mark.marked = false;
    mark.settle_from_ns = header.timestamp_ns;
    return;
  }
  if (mark.marked) return;
  if (header.timestamp_ns < mark.settle_from_ns + kProcessSettleTimeNs) {
    // Settling: the loader may have mapped a library since the last read. A sample running where
    // the maps show nothing reads them again now, not once RefreshMaps's 500 ms have passed
    // (up to 10 samples of [unknown] frames at 99 Hz before the settling read).
    if (!sample.user_regs.empty() &&
        process->Find(ProcessAddress{sample.user_regs[EMBER_USER_REG_IP]}) == nullptr) {
      table_.ReloadMaps(process);
    }
    return;
  }
  table_.ReloadMaps(process);
  mark_(process->pid);
  mark.marked = true;
  mark.marked_in_poll = polls_;
}

}  // namespace ember
