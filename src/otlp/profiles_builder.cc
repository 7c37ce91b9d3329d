// Builds OTLP Profiles requests: interns strings, attributes, mappings, functions, locations and
// stacks into the request's one ProfilesDictionary, then emits one ResourceProfiles per process.
#include "otlp/profiles_builder.h"

#include <algorithm>
#include <array>
#include <map>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/names.h"
#include "common/utf8.h"

namespace ember {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;
namespace common_pb = opentelemetry::proto::common::v1;
namespace profiles_pb = opentelemetry::proto::profiles::v1development;

// Valid UTF-8 (a repair may triple a name's length, so the cut comes after it), at most
// kMaxNameBytes: names come cut from the symbolizers, this bounds what any caller sends.
std::string Utf8(absl::string_view s) {
  std::string out = IsValidUtf8(s) ? std::string(s) : ToValidUtf8(s);
  CapName(out, NameKind::kOutput);
  return out;
}

// The request's dictionary. Every key below determines its entry completely, so distinct keys
// give distinct entries and no table holds a duplicate; a key whose entry would be the zero value
// answers index 0 instead of adding a copy of it.
class Dictionary {
 public:
  explicit Dictionary(profiles_pb::ProfilesDictionary* out) : out_(out) {
    out_->add_mapping_table();
    out_->add_location_table();
    out_->add_function_table();
    out_->add_link_table();
    out_->add_string_table();
    out_->add_attribute_table();
    out_->add_stack_table();
    strings_.emplace("", 0);
  }

  int32_t String(absl::string_view s) {
    if (auto it = strings_.find(s); it != strings_.end()) return it->second;
    int32_t index;
    if (s.size() > kMaxNameBytes) {  // as Utf8()
      std::string cut(s.data(), s.size());
      CapName(cut, NameKind::kOutput);
      index = String(cut);
    } else if (IsValidUtf8(s)) {
      index = out_->string_table_size();
      out_->add_string_table(std::string(s));
    } else {
      // Two different raw strings may repair to the same text: intern the repaired one.
      index = String(ToValidUtf8(s));
    }
    strings_.emplace(std::string(s), index);
    return index;
  }

  // A string-valued attribute (values stay inline: Pyroscope reads string_value).
  int32_t Attribute(int32_t key_strindex, absl::string_view value) {
    // Keyed by the repaired text, which is what the entry holds.
    auto [it, inserted] = attributes_.try_emplace(std::make_pair(key_strindex, Utf8(value)), 0);
    if (inserted) {
      it->second = out_->attribute_table_size();
      profiles_pb::KeyValueAndUnit* kv = out_->add_attribute_table();
      kv->set_key_strindex(key_strindex);
      kv->mutable_value()->set_string_value(it->first.second);
    }
    return it->second;
  }

  // The link of a sample's trace context; the zero link (index 0) when it has none.
  int32_t Link(const TraceLink& link) {
    if (link.empty()) return 0;
    std::array<uint8_t, 24> key;
    std::copy(link.trace_id.begin(), link.trace_id.end(), key.begin());
    std::copy(link.span_id.begin(), link.span_id.end(), key.begin() + link.trace_id.size());
    auto [it, inserted] = links_.try_emplace(key, 0);
    if (inserted) {
      it->second = out_->link_table_size();
      profiles_pb::Link* out = out_->add_link_table();
      out->set_trace_id(link.trace_id.data(), link.trace_id.size());
      out->set_span_id(link.span_id.data(), link.span_id.size());
    }
    return it->second;
  }

  int32_t Location(const Frame& frame) {
    // Most samples of an interval share Frame objects from the symbol cache, so the pointer
    // lookup usually answers without hashing strings.
    if (auto it = by_pointer_.find(&frame); it != by_pointer_.end()) return it->second;
    // The spec's order: inlined functions innermost first, the function they were inlined into
    // (the outermost caller) last.
    std::vector<std::pair<int32_t, uint32_t>> lines;
    lines.reserve(frame.inlined.size() + 1);
    for (const InlineFrame& inlined : frame.inlined) {
      lines.emplace_back(Function(inlined.function, inlined.source_file), inlined.line);
    }
    lines.emplace_back(Function(frame.function, frame.source_file), frame.line);
    LocationKey key{Mapping(frame), frame.address, std::move(lines), FrameType(frame.kind)};
    auto [it, inserted] = locations_.try_emplace(std::move(key), 0);
    if (inserted) {
      it->second = out_->location_table_size();
      profiles_pb::Location* loc = out_->add_location_table();
      loc->set_mapping_index(std::get<0>(it->first));
      loc->set_address(frame.address);
      for (const auto& [function_index, line_number] : std::get<2>(it->first)) {
        profiles_pb::Line* line = loc->add_lines();
        line->set_function_index(function_index);
        line->set_line(line_number);
      }
      loc->add_attribute_indices(std::get<3>(it->first));
    }
    by_pointer_.emplace(&frame, it->second);
    return it->second;
  }

  int32_t Stack(const std::vector<int32_t>& location_indices) {
    if (location_indices.empty()) return 0;
    auto [it, inserted] = stacks_.try_emplace(location_indices, 0);
    if (inserted) {
      it->second = out_->stack_table_size();
      out_->add_stack_table()->mutable_location_indices()->Add(location_indices.begin(),
                                                               location_indices.end());
    }
    return it->second;
  }

 private:
  // (mapping, address, (function, line) of each Line, frame type attribute)
  using LocationKey =
      std::tuple<int32_t, uint64_t, std::vector<std::pair<int32_t, uint32_t>>, int32_t>;

  int32_t FrameType(FrameKind kind) {
    const int32_t key = String("profile.frame.type");
    const std::string_view type = FrameTypeName(kind);
    return Attribute(key, absl::string_view(type.data(), type.size()));
  }

  int32_t Mapping(const Frame& frame) {
    if (frame.module.empty() && frame.build_id.empty()) return 0;
    // One mapping per (module, build id): two binaries at the same path stay apart.
    const std::pair<int32_t, int32_t> key{
        String(frame.module),
        frame.build_id.empty()
            ? 0
            : Attribute(String("process.executable.build_id.gnu"), frame.build_id)};
    auto [it, inserted] = mappings_.try_emplace(key, 0);
    if (inserted) {
      it->second = out_->mapping_table_size();
      profiles_pb::Mapping* m = out_->add_mapping_table();
      // memory_start, memory_limit and file_offset stay 0 (unknown): a Frame does not record
      // where its file was mapped, and its address is already an ELF virtual address (a kernel
      // address for kernel frames), which is what a receiver symbolizing by build id needs.
      m->set_filename_strindex(key.first);
      if (key.second != 0) m->add_attribute_indices(key.second);
    }
    return it->second;
  }

  int32_t Function(absl::string_view name, absl::string_view source_file) {
    const std::pair<int32_t, int32_t> key{String(name), String(source_file)};
    if (key.first == 0 && key.second == 0) return 0;
    auto [it, inserted] = functions_.try_emplace(key, 0);
    if (inserted) {
      it->second = out_->function_table_size();
      profiles_pb::Function* fn = out_->add_function_table();
      fn->set_name_strindex(key.first);
      fn->set_filename_strindex(key.second);
    }
    return it->second;
  }

  profiles_pb::ProfilesDictionary* out_;
  absl::flat_hash_map<std::string, int32_t> strings_;
  absl::flat_hash_map<std::pair<int32_t, std::string>, int32_t> attributes_;
  absl::flat_hash_map<const Frame*, int32_t> by_pointer_;
  absl::flat_hash_map<LocationKey, int32_t> locations_;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> mappings_;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> functions_;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> stacks_;
  absl::flat_hash_map<std::array<uint8_t, 24>, int32_t> links_;  // trace id, then span id
};

void AddString(common_pb::KeyValue* kv, absl::string_view key, absl::string_view value) {
  kv->set_key(std::string(key));
  kv->mutable_value()->set_string_value(Utf8(value));
}

const ResourceAttribute* FindAttribute(const std::vector<ResourceAttribute>& attributes,
                                       absl::string_view key) {
  for (const ResourceAttribute& a : attributes) {
    if (a.key == key) return &a;
  }
  return nullptr;
}

// Keys FillResource decides itself; an OTEL_RESOURCE_ATTRIBUTES entry never adds a second copy.
constexpr std::array<absl::string_view, 6> kSetFromProcess = {"service.name",
                                                              "host.name",
                                                              "process.pid",
                                                              "process.executable.name",
                                                              "process.executable.path",
                                                              "container.id"};

// The keys `meta.published` sets on the resource: those with a value that the agent does not
// measure itself, each once (the first).
std::vector<const ProcessLabel*> PublishedAttributes(const ProcessMetadata& meta) {
  std::vector<const ProcessLabel*> published;
  for (const ProcessLabel& a : meta.published) {
    if (a.value.empty() || IsMeasuredResourceKey(a.key) ||
        absl::c_any_of(published, [&](const ProcessLabel* p) { return p->key == a.key; })) {
      continue;
    }
    published.push_back(&a);
  }
  return published;
}

void FillResource(uint32_t pid, absl::string_view process_name, const ProcessMetadata& meta,
                  const ResourceContext& context,
                  opentelemetry::proto::resource::v1::Resource* resource) {
  const absl::string_view executable =
      meta.executable_name.empty() ? process_name : absl::string_view(meta.executable_name);
  const std::vector<const ProcessLabel*> published = PublishedAttributes(meta);
  const auto published_value = [&](absl::string_view key) -> const std::string* {
    for (const ProcessLabel* a : published) {
      if (a->key == key) return &a->value;
    }
    return nullptr;
  };

  // What the process says of itself wins over the agent's configuration and the workload's name.
  std::string service;
  if (const std::string* own = published_value("service.name")) service = *own;
  if (service.empty()) service = context.service_name;
  if (service.empty()) {
    if (const ResourceAttribute* a = FindAttribute(context.attributes, "service.name")) {
      service = a->value;
    }
  }
  if (service.empty()) service = meta.service_name;
  if (service.empty()) {
    service = executable.empty() ? "unknown_service" : absl::StrCat("unknown_service:", executable);
  }
  AddString(resource->add_attributes(), "service.name", service);

  const ResourceAttribute* host = FindAttribute(context.attributes, "host.name");
  const absl::string_view host_name = host != nullptr ? host->value : context.host_name;
  if (!host_name.empty()) AddString(resource->add_attributes(), "host.name", host_name);

  common_pb::KeyValue* pid_kv = resource->add_attributes();
  pid_kv->set_key("process.pid");
  pid_kv->mutable_value()->set_int_value(pid);
  if (!executable.empty()) {
    AddString(resource->add_attributes(), "process.executable.name", executable);
  }
  if (!meta.executable_path.empty()) {
    AddString(resource->add_attributes(), "process.executable.path", meta.executable_path);
  }
  if (!meta.container_id.empty()) {
    AddString(resource->add_attributes(), "container.id", meta.container_id);
  }
  // The process's own attributes (its pod) come before the agent-wide ones, and win over them;
  // what it published wins over what the agent derived, except what the agent measures.
  std::vector<absl::string_view> own_keys;
  for (const ProcessLabel& a : meta.attributes) {
    if (a.value.empty() || absl::c_linear_search(kSetFromProcess, a.key) ||
        absl::c_linear_search(own_keys, a.key) || published_value(a.key) != nullptr) {
      continue;
    }
    own_keys.push_back(a.key);
    AddString(resource->add_attributes(), Utf8(a.key), a.value);
  }
  for (const ProcessLabel* a : published) {
    if (absl::c_linear_search(kSetFromProcess, a->key) || absl::c_linear_search(own_keys, a->key)) {
      continue;
    }
    own_keys.push_back(a->key);
    AddString(resource->add_attributes(), Utf8(a->key), a->value);
  }

  for (const ResourceAttribute& a : context.attributes) {
    if (!absl::c_linear_search(kSetFromProcess, a.key) && !absl::c_linear_search(own_keys, a.key)) {
      AddString(resource->add_attributes(), Utf8(a.key), a.value);
    }
  }
}

std::string RandomProfileId(absl::BitGen& gen) {
  uint64_t words[2] = {0, 0};
  // An all-zero id is invalid; drawing one will not happen, but the loop costs nothing.
  while (words[0] == 0 && words[1] == 0) {
    words[0] = absl::Uniform<uint64_t>(gen);
    words[1] = absl::Uniform<uint64_t>(gen);
  }
  return std::string(reinterpret_cast<const char*>(words), sizeof(words));
}

// The request for `chosen`, samples of `profile` with a count above 0 (the interval's times
// come from `profile`).
collector_pb::ExportProfilesServiceRequest BuildRequest(const IntervalProfile& profile,
                                                        std::span<const StackSample* const> chosen,
                                                        const ResourceContext& context) {
  collector_pb::ExportProfilesServiceRequest request;
  Dictionary dict(request.mutable_dictionary());

  std::map<uint32_t, std::vector<const StackSample*>> by_pid;  // ascending pids
  for (const StackSample* s : chosen) by_pid[s->pid].push_back(s);
  if (by_pid.empty()) return request;  // the dictionary holds only its zero values

  const int32_t samples = dict.String("samples");
  const int32_t count = dict.String("count");
  const int32_t cpu = dict.String("cpu");
  const int32_t nanoseconds = dict.String("nanoseconds");
  const int32_t thread_name = dict.String("thread.name");
  absl::BitGen gen;
  std::vector<int32_t> locations;
  for (const auto& [pid, pid_samples] : by_pid) {
    profiles_pb::ResourceProfiles* rp = request.add_resource_profiles();
    const std::string_view process = pid_samples.front()->process;
    const ProcessMetadata* metadata = profile.MetadataOf(pid);
    FillResource(pid, {process.data(), process.size()},
                 metadata != nullptr ? *metadata : ProcessMetadata{}, context,
                 rp->mutable_resource());
    profiles_pb::ScopeProfiles* sp = rp->add_scope_profiles();
    sp->mutable_scope()->set_name(Utf8(context.scope_name));
    sp->mutable_scope()->set_version(Utf8(context.scope_version));

    profiles_pb::Profile* out = sp->add_profiles();
    out->mutable_sample_type()->set_type_strindex(samples);
    out->mutable_sample_type()->set_unit_strindex(count);
    out->mutable_period_type()->set_type_strindex(cpu);
    out->mutable_period_type()->set_unit_strindex(nanoseconds);
    out->set_period(profile.period_ns);
    out->set_time_unix_nano(static_cast<uint64_t>(profile.start_unix_ns));
    out->set_duration_nano(static_cast<uint64_t>(profile.duration_ns));
    out->set_profile_id(RandomProfileId(gen));
    out->mutable_samples()->Reserve(static_cast<int>(pid_samples.size()));

    for (const StackSample* s : pid_samples) {
      locations.clear();
      for (const Frame* frame : s->frames) {
        if (frame != nullptr) locations.push_back(dict.Location(*frame));
      }
      profiles_pb::Sample* sample = out->add_samples();
      sample->set_stack_index(dict.Stack(locations));
      // With a period set, Pyroscope takes exactly one value per sample.
      sample->add_values(s->count);
      if (!s->thread.empty()) {
        sample->add_attribute_indices(
            dict.Attribute(thread_name, absl::string_view(s->thread.data(), s->thread.size())));
      }
      sample->set_link_index(dict.Link(s->context.link));
      for (const SampleAttribute& attribute : s->context.attributes) {
        if (attribute.value.empty() || attribute.key == "thread.name") continue;
        sample->add_attribute_indices(
            dict.Attribute(dict.String({attribute.key.data(), attribute.key.size()}),
                           {attribute.value.data(), attribute.value.size()}));
      }
    }
  }
  return request;
}

// The samples with a count above 0, by pid (stable: a process's samples keep their order).
std::vector<const StackSample*> CountedSamplesByPid(const IntervalProfile& profile) {
  std::vector<const StackSample*> chosen;
  chosen.reserve(profile.samples.size());
  for (const StackSample& s : profile.samples) {
    if (s.count > 0) chosen.push_back(&s);
  }
  std::stable_sort(chosen.begin(), chosen.end(),
                   [](const StackSample* a, const StackSample* b) { return a->pid < b->pid; });
  return chosen;
}

// Where to halve `samples` (by pid, at least 2 of them): at the change of process nearest the
// middle, or in the middle of a process that has them all.
size_t SplitPoint(std::span<const StackSample* const> samples) {
  const size_t middle = samples.size() / 2;
  for (size_t step = 0; step < samples.size(); ++step) {
    for (size_t at : {middle - std::min(step, middle), middle + step}) {
      if (at > 0 && at < samples.size() && samples[at - 1]->pid != samples[at]->pid) return at;
    }
  }
  return middle;
}

void AppendRequestsOfAtMost(const IntervalProfile& profile,
                            std::span<const StackSample* const> samples,
                            const ResourceContext& context, size_t max_request_bytes,
                            std::vector<collector_pb::ExportProfilesServiceRequest>* out) {
  collector_pb::ExportProfilesServiceRequest request = BuildRequest(profile, samples, context);
  if (samples.size() <= 1 || request.ByteSizeLong() <= max_request_bytes) {
    out->push_back(std::move(request));
    return;
  }
  const size_t at = SplitPoint(samples);
  AppendRequestsOfAtMost(profile, samples.first(at), context, max_request_bytes, out);
  AppendRequestsOfAtMost(profile, samples.subspan(at), context, max_request_bytes, out);
}

}  // namespace

collector_pb::ExportProfilesServiceRequest BuildExportRequest(const IntervalProfile& profile,
                                                              const ResourceContext& context) {
  return BuildRequest(profile, CountedSamplesByPid(profile), context);
}

std::vector<collector_pb::ExportProfilesServiceRequest> BuildExportRequests(
    const IntervalProfile& profile, const ResourceContext& context, size_t max_request_bytes) {
  const std::vector<const StackSample*> samples = CountedSamplesByPid(profile);
  std::vector<collector_pb::ExportProfilesServiceRequest> requests;
  if (samples.empty()) return requests;
  AppendRequestsOfAtMost(profile, samples, context, max_request_bytes, &requests);
  return requests;
}

}  // namespace ember
