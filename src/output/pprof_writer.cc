// Builds pprof messages: interns strings, functions, mappings and locations into the profile's
// tables once per interval, then emits one Sample per StackSample.
#include "output/pprof_writer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/gzip.h"
#include "common/names.h"
#include "google/protobuf/arena.h"
#include "output/atomic_file.h"

namespace ember {
namespace {

namespace pb = perftools::profiles;

// Fills one Profile. Its tables are keyed by views of the profile's frames and of the message's
// own strings, both of which outlive the builder: no string is copied for a key.
class PprofBuilder {
 public:
  explicit PprofBuilder(pb::Profile* out) : out_(*out) {
    Intern("");  // pprof requires string_table[0] == "".
  }

  void Build(const IntervalProfile& profile) && {
    SetValueType(out_.add_sample_type(), "samples", "count");
    SetValueType(out_.add_sample_type(), "cpu", "nanoseconds");
    SetValueType(out_.mutable_period_type(), "cpu", "nanoseconds");
    out_.set_period(profile.period_ns);
    out_.set_time_nanos(profile.start_unix_ns);
    out_.set_duration_nanos(profile.duration_ns);
    // pprof shows the last sample type by default; CPU time is the more useful default.
    out_.set_default_sample_type(Intern("cpu"));

    const int64_t pid_key = Intern("pid");
    const int64_t process_key = Intern("process");
    const int64_t thread_key = Intern("thread");
    const int64_t trace_id_key = Intern("trace_id");
    const int64_t span_id_key = Intern("span_id");
    for (const StackSample& s : profile.samples) {
      if (s.count <= 0) continue;
      pb::Sample* sample = out_.add_sample();
      sample->mutable_location_id()->Reserve(static_cast<int>(s.frames.size()));
      for (const Frame* frame : s.frames) {
        if (frame != nullptr) sample->add_location_id(LocationId(*frame));
      }
      sample->add_value(s.count);
      sample->add_value(s.count * profile.period_ns);
      pb::Label* pid = sample->add_label();
      pid->set_key(pid_key);
      pid->set_num(s.pid);
      AddStrLabel(sample, process_key, {s.process.data(), s.process.size()});
      AddStrLabel(sample, thread_key, {s.thread.data(), s.thread.size()});
      if (!s.context.link.empty()) {
        AddStrLabel(sample, trace_id_key, Hex(s.context.link.trace_id));
        const auto& span = s.context.link.span_id;
        if (std::any_of(span.begin(), span.end(), [](uint8_t b) { return b != 0; })) {
          AddStrLabel(sample, span_id_key, Hex(span));
        }
      }
      attribute_keys_.clear();
      for (const SampleAttribute& attribute : s.context.attributes) {
        const absl::string_view key(attribute.key.data(), attribute.key.size());
        if (IsSampleLabel(key) || attribute.value.empty()) continue;
        attribute_keys_.push_back(Intern(key));
        AddStrLabel(sample, attribute_keys_.back(),
                    {attribute.value.data(), attribute.value.size()});
      }
      for (const auto& [key, value] : ProcessLabelsOf(profile, s.pid)) {
        // The span's own attribute says more of this sample than its process's of the same name.
        if (absl::c_linear_search(attribute_keys_, key)) continue;
        pb::Label* label = sample->add_label();
        label->set_key(key);
        label->set_str(value);
      }
    }
  }

 private:
  int64_t Intern(absl::string_view s) {
    if (auto it = strings_.find(s); it != strings_.end()) return it->second;
    if (s.size() > kMaxNameBytes) {
      // Names come cut from the symbolizers; this keeps the file bounded for any other caller.
      std::string cut(s.data(), s.size());
      CapName(cut, NameKind::kOutput);
      return Intern(cut);
    }
    const int64_t id = out_.string_table_size();
    // The key views the table's own copy, which stays where it is as the table grows.
    std::string* copy = out_.add_string_table();
    copy->assign(s.data(), s.size());
    strings_.emplace(*copy, id);
    return id;
  }

  // The labels Ember sets on a sample itself, which a thread context's attribute of the same name
  // would make ambiguous.
  static bool IsSampleLabel(absl::string_view key) {
    return key == "pid" || key == "process" || key == "thread" || key == "trace_id" ||
           key == "span_id";
  }

  // Lowercase hex, as trace and span ids are written in W3C traceparent headers.
  template <size_t N>
  absl::string_view Hex(const std::array<uint8_t, N>& bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    hex_.resize(2 * N);
    for (size_t i = 0; i < N; ++i) {
      hex_[2 * i] = kDigits[bytes[i] >> 4];
      hex_[2 * i + 1] = kDigits[bytes[i] & 0xf];
    }
    return hex_;
  }

  // The (key, value) string ids every sample of `pid` carries, worked out once per process: its
  // container, pod and service, named as OTLP resource attributes are. What the process published
  // about itself wins over what the agent derived for the same key, except the keys the agent
  // measures (IsMeasuredResourceKey) and the sample's own labels.
  const std::vector<std::pair<int64_t, int64_t>>& ProcessLabelsOf(const IntervalProfile& profile,
                                                                  uint32_t pid) {
    auto [it, inserted] = process_labels_.try_emplace(pid);
    if (!inserted) return it->second;
    const ProcessMetadata* metadata = profile.MetadataOf(pid);
    if (metadata == nullptr) return it->second;
    std::vector<std::pair<int64_t, int64_t>>& labels = it->second;
    std::vector<absl::string_view> published_keys;
    for (const ProcessLabel& label : metadata->published) {
      if (!label.value.empty() && !IsMeasuredResourceKey(label.key) && !IsSampleLabel(label.key)) {
        published_keys.push_back(label.key);
      }
    }
    const auto add = [&](absl::string_view key, absl::string_view value) {
      if (value.empty()) return;
      for (const auto& [k, v] : labels) {
        if (out_.string_table(static_cast<int>(k)) == key) return;  // each key once
      }
      labels.emplace_back(Intern(key), Intern(value));
    };
    const auto overridden = [&](absl::string_view key) {
      return absl::c_linear_search(published_keys, key);
    };
    add("container.id", metadata->container_id);
    for (const ProcessLabel& label : metadata->attributes) {
      if (!overridden(label.key)) add(label.key, label.value);
    }
    if (!overridden("service.name")) add("service.name", metadata->service_name);
    for (const ProcessLabel& label : metadata->published) {
      if (absl::c_linear_search(published_keys, label.key)) add(label.key, label.value);
    }
    return labels;
  }

  void SetValueType(pb::ValueType* vt, absl::string_view type, absl::string_view unit) {
    vt->set_type(Intern(type));
    vt->set_unit(Intern(unit));
  }

  void AddStrLabel(pb::Sample* sample, int64_t key, absl::string_view value) {
    if (value.empty()) return;
    pb::Label* label = sample->add_label();
    label->set_key(key);
    label->set_str(Intern(value));
  }

  uint64_t LocationId(const Frame& frame) {
    // Most samples of an interval share Frame objects from the symbol cache, so the pointer
    // lookup usually answers without hashing strings.
    if (auto it = by_pointer_.find(&frame); it != by_pointer_.end()) return it->second;
    LocationKey key{frame.kind, frame.module, frame.address, frame.function};
    auto [it, inserted] = locations_.try_emplace(std::move(key), 0);
    if (inserted) {
      pb::Location* loc = out_.add_location();
      loc->set_id(static_cast<uint64_t>(out_.location_size()));
      loc->set_mapping_id(MappingId(frame));
      loc->set_address(frame.address);
      // pprof's order: the innermost inlined function first, the function they were inlined
      // into (the caller of them all) last.
      for (const InlineFrame& inlined : frame.inlined) {
        AddLine(loc, inlined.function, inlined.source_file, inlined.line);
      }
      AddLine(loc, frame.function, frame.source_file, frame.line);
      it->second = loc->id();
    }
    by_pointer_.emplace(&frame, it->second);
    return it->second;
  }

  void AddLine(pb::Location* loc, absl::string_view function, absl::string_view source_file,
               uint32_t line_number) {
    pb::Line* line = loc->add_line();
    line->set_function_id(FunctionId(function, source_file));
    if (line_number != 0) line->set_line(line_number);
  }

  uint64_t FunctionId(absl::string_view name, absl::string_view source_file) {
    auto [it, inserted] = functions_.try_emplace(std::make_pair(name, source_file), 0);
    if (inserted) {
      pb::Function* fn = out_.add_function();
      fn->set_id(static_cast<uint64_t>(out_.function_size()));
      fn->set_name(Intern(name));
      fn->set_system_name(fn->name());
      if (!source_file.empty()) fn->set_filename(Intern(source_file));
      it->second = fn->id();
    }
    return it->second;
  }

  uint64_t MappingId(const Frame& frame) {
    auto [it, inserted] = mappings_.try_emplace(
        std::make_pair(absl::string_view(frame.module), absl::string_view(frame.build_id)),
        nullptr);
    if (inserted) {
      pb::Mapping* m = out_.add_mapping();
      m->set_id(static_cast<uint64_t>(out_.mapping_size()));
      m->set_filename(Intern(frame.module));
      if (!frame.build_id.empty()) m->set_build_id(Intern(frame.build_id));
      // Every frame we emit already carries its function name (or "module+0x..."), so pprof
      // must not try to symbolize these addresses again.
      m->set_has_functions(true);
      it->second = m;
    }
    pb::Mapping* m = it->second;
    // Addresses are ELF (or kernel) virtual addresses, not process addresses, so the mapping
    // covers [0, highest address seen] rather than a real memory range.
    if (frame.address >= m->memory_limit()) m->set_memory_limit(frame.address + 1);
    if (!frame.source_file.empty()) m->set_has_filenames(true);
    if (frame.line != 0) m->set_has_line_numbers(true);
    if (!frame.inlined.empty()) m->set_has_inline_frames(true);
    return m->id();
  }

  using LocationKey = std::tuple<FrameKind, absl::string_view, uint64_t, absl::string_view>;
  using StringPair = std::pair<absl::string_view, absl::string_view>;

  pb::Profile& out_;
  std::string hex_;                      // Hex()'s text, reused
  std::vector<int64_t> attribute_keys_;  // a sample's context attribute labels, reused
  absl::flat_hash_map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> process_labels_;
  absl::flat_hash_map<absl::string_view, int64_t> strings_;
  absl::flat_hash_map<const Frame*, uint64_t> by_pointer_;
  absl::flat_hash_map<LocationKey, uint64_t> locations_;
  absl::flat_hash_map<StringPair, uint64_t> functions_;
  // Pointers into out_.mapping stay valid: RepeatedPtrField never moves its elements.
  absl::flat_hash_map<StringPair, pb::Mapping*> mappings_;
};

}  // namespace

perftools::profiles::Profile BuildPprof(const IntervalProfile& profile) {
  pb::Profile out;
  PprofBuilder(&out).Build(profile);
  return out;
}

absl::StatusOr<std::string> EncodePprofFile(const IntervalProfile& profile) {
  // On an arena: the message's tens of thousands of small parts are allocated from a few blocks
  // and freed at once (with the heap, malloc and free were over half of building it).
  google::protobuf::Arena arena;
  auto* message = google::protobuf::Arena::CreateMessage<pb::Profile>(&arena);
  PprofBuilder(message).Build(profile);
  std::string raw;
  if (!message->SerializeToString(&raw)) {
    return absl::InternalError("cannot serialize pprof profile");
  }
  std::string gz;
  if (absl::Status s = GzipCompress(raw, &gz); !s.ok()) return s;
  return gz;
}

absl::Status WritePprofFile(const IntervalProfile& profile, const std::string& path) {
  absl::StatusOr<std::string> file = EncodePprofFile(profile);
  if (!file.ok()) return file.status();
  return WriteFileAtomically(path, *file);
}

}  // namespace ember
