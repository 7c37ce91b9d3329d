// Parser for the kernel's CPU list format.
#include "agent/cpu_list.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ember {

absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text) {
  std::vector<int> cpus;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return absl::InvalidArgumentError("empty CPU list");
  for (std::string_view part : absl::StrSplit(text, ',')) {
    std::pair<std::string_view, std::string_view> range = absl::StrSplit(part, '-');
    int first = 0;
    int last = 0;
    if (!absl::SimpleAtoi(range.first, &first) || first < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad CPU list '", text, "'"));
    }
    last = first;
    if (!range.second.empty() &&
        (!absl::SimpleAtoi(range.second, &last) || last < first || last - first > 65536)) {
      return absl::InvalidArgumentError(absl::StrCat("bad CPU list '", text, "'"));
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace ember
