// The kernel's symbols that name kernel frames: read once at start-up, and again at an
// interval's end when modules or BPF programs may have come since (KernelSymbolsRefresh).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "stacks/frame_resolver.h"
#include "stacks/kernel_symbols_refresh.h"
#include "status/metrics_registry.h"
#include "symbolize/kallsyms.h"

namespace ember {

class KernelSymbolsSource {
 public:
  // Registers ember_kernel_symbols_reads_total in `metrics`.
  explicit KernelSymbolsSource(MetricsRegistry& metrics,
                               std::string kallsyms_path = "/proc/kallsyms",
                               std::string modules_path = "/proc/modules");

  // The first read. An error (no addresses shown, say) leaves symbols() null: kernel frames go
  // unnamed. `recheck`: how often frames above the kernel image may cause a read again.
  absl::Status Load(std::chrono::steady_clock::duration recheck);

  // Null until Load succeeded; replaced only by Refresh.
  const KernelSymbols* symbols() const { return symbols_ ? &*symbols_ : nullptr; }

  // Reads the symbols again when the list of modules changed or frames keep being named above
  // the kernel image; `frames` names kernel frames anew only if the table changed. Call it only
  // where the frame cache's generation turns, as a replacement drops every cached kernel frame.
  void Refresh(FrameResolver& frames);

 private:
  std::string kallsyms_path_;
  std::string modules_path_;
  Counter* reads_metric_;
  std::optional<KernelSymbols> symbols_;
  // Kept open to read the symbols again without CAP_SYSLOG; both set only when the first read
  // showed addresses.
  std::optional<KallsymsFile> file_;
  std::optional<KernelSymbolsRefresh> refresh_;
};

}  // namespace ember
