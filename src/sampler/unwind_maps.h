// The BPF maps of the in-BPF stack walk (docs/bpf-unwinding.md), as the agent writes them:
// bpf_profiler.cc through the bpf syscall, tests through a stand-in.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "sampler/sample_record_layout.h"

namespace ember {

class UnwindMaps {
 public:
  virtual ~UnwindMaps() = default;
  // Rows [first, first + rows.size()) of `unwind_rows`.
  virtual absl::Status WriteRows(uint32_t first, std::span<const ember_unwind_row> rows) = 0;
  // Entries [first, first + buckets.size()) of `unwind_buckets`.
  virtual absl::Status WriteBuckets(uint32_t first, std::span<const uint32_t> buckets) = 0;
  virtual absl::Status SetProcess(uint32_t pid, const ember_unwind_proc& proc) = 0;
  virtual void RemoveProcess(uint32_t pid) = 0;
};

}  // namespace ember
