// Reading the kernel's symbols, first and again.
#include "stacks/kernel_symbols_source.h"

#include <cstdint>
#include <utility>

#include "absl/strings/string_view.h"
#include "common/read_file.h"
#include "spdlog/spdlog.h"

namespace ember {

KernelSymbolsSource::KernelSymbolsSource(MetricsRegistry& metrics, std::string kallsyms_path,
                                         std::string modules_path)
    : kallsyms_path_(std::move(kallsyms_path)), modules_path_(std::move(modules_path)) {
  // Registration fails only on a programming error (a bad or duplicate name).
  reads_metric_ =
      metrics
          .AddCounter("ember_kernel_symbols_reads_total",
                      "Reads of /proc/kallsyms after the first (modules listed differently, or "
                      "kernel frames above the kernel image: at most every 5 minutes), changed or "
                      "not.")
          .value();
}

absl::Status KernelSymbolsSource::Load(std::chrono::steady_clock::duration recheck) {
  absl::StatusOr<KallsymsFile> kallsyms = KallsymsFile::Open(kallsyms_path_);
  absl::StatusOr<KernelSymbols> symbols =
      kallsyms.ok() ? kallsyms->Read() : absl::StatusOr<KernelSymbols>(kallsyms.status());
  if (!symbols.ok()) return symbols.status();
  symbols_ = std::move(symbols).value();
  file_ = std::move(kallsyms).value();
  refresh_.emplace(ReadWholeFile(modules_path_), std::chrono::steady_clock::now(), recheck);
  return absl::OkStatus();
}

void KernelSymbolsSource::Refresh(FrameResolver& frames) {
  if (!file_ || !refresh_) return;
  const std::optional<std::string> modules = ReadWholeFile(modules_path_);
  const std::optional<absl::string_view> modules_text =
      modules ? std::optional<absl::string_view>(*modules) : std::nullopt;
  const uint64_t misses = frames.stats().kernel_misses_past_image;
  const auto now = std::chrono::steady_clock::now();
  if (!refresh_->Check(modules_text, misses, now)) return;
  reads_metric_->Increment();
  absl::StatusOr<KernelSymbols> symbols = file_->Read();
  if (!symbols.ok()) {
    spdlog::warn("kernel symbols not read again (the table read before is kept): {}",
                 std::string(symbols.status().message()));
    return;
  }
  if (*symbols == *symbols_) return;
  spdlog::info(
      "kernel symbols read again: {} text symbols ({} before), in {} ms", symbols->size(),
      symbols_->size(),
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - now)
          .count());
  symbols_ = std::move(symbols).value();
  frames.ReplaceKernelSymbols(&*symbols_);
}

}  // namespace ember
