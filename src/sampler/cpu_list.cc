// Parser for the kernel's CPU list format.
#include "sampler/cpu_list.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace ember {

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return absl::InvalidArgumentError("empty CPU list");
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    size_t dash = part.find('-');
    int first = 0;
    int last = 0;
    bool ok = absl::SimpleAtoi(part.substr(0, dash), &first) && first >= 0;
    last = first;
    if (ok && dash != absl::string_view::npos) {
      ok = absl::SimpleAtoi(part.substr(dash + 1), &last) && last >= first && last - first <= 65536;
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad CPU list '", text, "'"));
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace ember
