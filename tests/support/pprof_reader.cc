// gunzip + protobuf parse + name lookup for pprof files.
#include "support/pprof_reader.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace ember::testing {

absl::StatusOr<perftools::profiles::Profile> ReadPprofFile(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes;
  char buffer[65536];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof(buffer))) > 0) bytes.append(buffer, n);
  gzclose(file);
  if (n < 0) return absl::DataLossError(absl::StrCat("bad gzip stream in ", path));
  perftools::profiles::Profile profile;
  if (!profile.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("not a pprof Profile: ", path));
  }
  return profile;
}

std::vector<NamedSample> NamedSamples(const perftools::profiles::Profile& profile) {
  std::unordered_map<uint64_t, const perftools::profiles::Function*> functions;
  for (const auto& f : profile.function()) functions[f.id()] = &f;
  std::unordered_map<uint64_t, const perftools::profiles::Mapping*> mappings;
  for (const auto& m : profile.mapping()) mappings[m.id()] = &m;
  std::unordered_map<uint64_t, const perftools::profiles::Location*> locations;
  for (const auto& l : profile.location()) locations[l.id()] = &l;
  auto str = [&](int64_t i) -> std::string {
    return i >= 0 && i < profile.string_table_size() ? profile.string_table(i) : "<bad index>";
  };
  int count_index = 0;
  for (int i = 0; i < profile.sample_type_size(); ++i) {
    if (str(profile.sample_type(i).type()) == "samples") count_index = i;
  }
  std::vector<NamedSample> out;
  for (const auto& sample : profile.sample()) {
    NamedSample named;
    named.count = sample.value_size() > count_index ? sample.value(count_index) : 0;
    for (uint64_t id : sample.location_id()) {
      auto loc = locations.find(id);
      if (loc == locations.end() || loc->second->line_size() == 0) {
        named.functions.push_back("<bad location>");
        named.modules.push_back("<bad location>");
        named.lines.push_back("<bad location>");
        continue;
      }
      auto mapping = mappings.find(loc->second->mapping_id());
      named.modules.push_back(mapping == mappings.end() ? "" : str(mapping->second->filename()));
      // pprof lists a location's lines innermost first, so the last is the out-of-line function.
      for (const auto& line : loc->second->line()) {
        auto fn = functions.find(line.function_id());
        named.lines.push_back(fn == functions.end() ? "<bad function>" : str(fn->second->name()));
      }
      named.functions.push_back(named.lines.back());
    }
    for (const auto& label : sample.label()) {
      std::string key = str(label.key());
      if (key == "process") named.process = str(label.str());
      if (key == "thread") named.thread = str(label.str());
      if (key == "pid") named.pid = label.num();
      if (label.str() != 0) named.labels[key] = str(label.str());
    }
    out.push_back(std::move(named));
  }
  return out;
}

std::vector<std::string> PprofFilesIn(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.path().string().ends_with(".pb.gz")) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace ember::testing
