// Reads Ember's gzip-compressed pprof files back for tests, as stacks of function names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pprof/profile.pb.h"

namespace ember::testing {

absl::StatusOr<perftools::profiles::Profile> ReadPprofFile(const std::string& path);

struct NamedSample {
  // Leaf first, one per location: the function of its last line, the one the others (if any)
  // were inlined into. These are the stack's real frames, what unwinding found.
  std::vector<std::string> functions;
  std::vector<std::string> modules;  // mapping file name of each entry of `functions`
  // Leaf first, every line of every location: inlined functions expanded, as pprof shows them.
  std::vector<std::string> lines;
  int64_t count = 0;                          // value of the samples/count type
  std::string process;                        // label "process"
  std::string thread;                         // label "thread"
  int64_t pid = 0;                            // label "pid"
  std::map<std::string, std::string> labels;  // every string label: process, container.id, ...
};
std::vector<NamedSample> NamedSamples(const perftools::profiles::Profile& profile);

// Every *.pb.gz in dir, in name order.
std::vector<std::string> PprofFilesIn(const std::string& dir);

}  // namespace ember::testing
