// Walks an export request once: the dictionary's tables first (zero values, duplicates, indices
// between tables), then every resource, scope, profile and sample. Paths in messages are built
// only when a rule fails, so the check is cheap enough to run on every interval.
#include "otlp/request_validator.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace ember {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;
namespace common_pb = opentelemetry::proto::common::v1;
namespace profiles_pb = opentelemetry::proto::profiles::v1development;

using Path = absl::FunctionRef<std::string()>;
using Indices = google::protobuf::RepeatedField<int32_t>;

absl::Status Violation(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::Status Utf8(absl::string_view s, Path where) {
  if (IsValidUtf8(s)) return absl::OkStatus();
  return Violation(absl::StrCat(where(), " is not valid UTF-8"));
}

// Index 0 is the zero value, and no entry is there twice.
template <typename T>
absl::Status ZeroFirstAndUnique(const google::protobuf::RepeatedPtrField<T>& table,
                                absl::string_view name) {
  if (table.empty()) {
    return Violation(absl::StrCat("dictionary.", name,
                                  " is empty; index 0 must hold the zero value of its type"));
  }
  if (table[0].ByteSizeLong() != 0) {
    return Violation(absl::StrCat("dictionary.", name, "[0] is not the zero value: {",
                                  table[0].ShortDebugString(), "}"));
  }
  absl::flat_hash_map<std::string, int> seen;
  for (int i = 0; i < table.size(); ++i) {
    auto [it, inserted] = seen.try_emplace(table[i].SerializeAsString(), i);
    if (!inserted) {
      return Violation(
          absl::StrCat("dictionary.", name, "[", i, "] duplicates ", name, "[", it->second, "]"));
    }
  }
  return absl::OkStatus();
}

class Validator {
 public:
  explicit Validator(const profiles_pb::ProfilesDictionary& d) : d_(d) {}

  absl::Status Dictionary() {
    if (d_.string_table().empty() || !d_.string_table(0).empty()) {
      return Violation(d_.string_table().empty()
                           ? std::string("dictionary.string_table is empty; index 0 must hold \"\"")
                           : absl::StrCat("dictionary.string_table[0] is \"",
                                          ToValidUtf8(d_.string_table(0)), "\"; it must be \"\""));
    }
    absl::flat_hash_map<absl::string_view, int> seen;
    for (int i = 0; i < d_.string_table_size(); ++i) {
      const std::string& s = d_.string_table(i);
      RETURN_IF_ERROR(Utf8(s, [&] { return absl::StrCat("dictionary.string_table[", i, "]"); }));
      auto [it, inserted] = seen.try_emplace(s, i);
      if (!inserted) {
        return Violation(absl::StrCat("dictionary.string_table[", i, "] duplicates string_table[",
                                      it->second, "] (\"", ToValidUtf8(s), "\")"));
      }
    }
    RETURN_IF_ERROR(ZeroFirstAndUnique(d_.mapping_table(), "mapping_table"));
    RETURN_IF_ERROR(ZeroFirstAndUnique(d_.location_table(), "location_table"));
    RETURN_IF_ERROR(ZeroFirstAndUnique(d_.function_table(), "function_table"));
    RETURN_IF_ERROR(ZeroFirstAndUnique(d_.link_table(), "link_table"));
    RETURN_IF_ERROR(ZeroFirstAndUnique(d_.attribute_table(), "attribute_table"));
    RETURN_IF_ERROR(ZeroFirstAndUnique(d_.stack_table(), "stack_table"));

    for (int i = 0; i < d_.mapping_table_size(); ++i) {
      const profiles_pb::Mapping& m = d_.mapping_table(i);
      const auto path = [&] { return absl::StrCat("dictionary.mapping_table[", i, "]"); };
      RETURN_IF_ERROR(StringIndex(m.filename_strindex(), Field(path, ".filename_strindex")));
      RETURN_IF_ERROR(AttributeIndices(m.attribute_indices(), path));
    }
    for (int i = 0; i < d_.location_table_size(); ++i) {
      const profiles_pb::Location& loc = d_.location_table(i);
      const auto path = [&] { return absl::StrCat("dictionary.location_table[", i, "]"); };
      RETURN_IF_ERROR(Index(loc.mapping_index(), d_.mapping_table_size(), "mapping_table",
                            Field(path, ".mapping_index")));
      for (int k = 0; k < loc.lines_size(); ++k) {
        RETURN_IF_ERROR(
            Index(loc.lines(k).function_index(), d_.function_table_size(), "function_table",
                  [&] { return absl::StrCat(path(), ".lines[", k, "].function_index"); }));
      }
      RETURN_IF_ERROR(AttributeIndices(loc.attribute_indices(), path));
    }
    for (int i = 0; i < d_.function_table_size(); ++i) {
      const profiles_pb::Function& fn = d_.function_table(i);
      const auto path = [&] { return absl::StrCat("dictionary.function_table[", i, "]"); };
      RETURN_IF_ERROR(StringIndex(fn.name_strindex(), Field(path, ".name_strindex")));
      RETURN_IF_ERROR(StringIndex(fn.system_name_strindex(), Field(path, ".system_name_strindex")));
      RETURN_IF_ERROR(StringIndex(fn.filename_strindex(), Field(path, ".filename_strindex")));
    }
    for (int i = 1; i < d_.link_table_size(); ++i) {
      const profiles_pb::Link& link = d_.link_table(i);
      if (link.trace_id().size() != 16 || link.span_id().size() != 8) {
        return Violation(absl::StrCat("dictionary.link_table[", i, "] has a ",
                                      link.trace_id().size(), "-byte trace_id and a ",
                                      link.span_id().size(),
                                      "-byte span_id; they must be 16 and 8"));
      }
      if (link.trace_id() == std::string(16, '\0')) {
        return Violation(absl::StrCat("dictionary.link_table[", i,
                                      "] has an all-zero trace_id, which names no trace (a sample "
                                      "without one has link_index 0)"));
      }
    }
    for (int i = 0; i < d_.attribute_table_size(); ++i) {
      const profiles_pb::KeyValueAndUnit& kv = d_.attribute_table(i);
      const auto path = [&] { return absl::StrCat("dictionary.attribute_table[", i, "]"); };
      RETURN_IF_ERROR(StringIndex(kv.key_strindex(), Field(path, ".key_strindex")));
      RETURN_IF_ERROR(StringIndex(kv.unit_strindex(), Field(path, ".unit_strindex")));
      RETURN_IF_ERROR(DictionaryValue(kv.value(), Field(path, ".value")));
    }
    for (int i = 0; i < d_.stack_table_size(); ++i) {
      const Indices& locations = d_.stack_table(i).location_indices();
      for (int k = 0; k < locations.size(); ++k) {
        RETURN_IF_ERROR(Index(locations[k], d_.location_table_size(), "location_table", [&] {
          return absl::StrCat("dictionary.stack_table[", i, "].location_indices[", k, "]");
        }));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ResourceProfiles(const profiles_pb::ResourceProfiles& rp, int i) {
    const auto rp_path = [&] { return absl::StrCat("resource_profiles[", i, "]"); };
    RETURN_IF_ERROR(PlainAttributes(rp.resource().attributes(), Field(rp_path, ".resource")));
    for (int j = 0; j < rp.scope_profiles_size(); ++j) {
      const profiles_pb::ScopeProfiles& sp = rp.scope_profiles(j);
      const auto sp_path = [&] { return absl::StrCat(rp_path(), ".scope_profiles[", j, "]"); };
      const auto scope_path = Field(sp_path, ".scope");
      RETURN_IF_ERROR(Utf8(sp.scope().name(), Field(scope_path, ".name")));
      RETURN_IF_ERROR(Utf8(sp.scope().version(), Field(scope_path, ".version")));
      RETURN_IF_ERROR(PlainAttributes(sp.scope().attributes(), scope_path));
      for (int k = 0; k < sp.profiles_size(); ++k) {
        RETURN_IF_ERROR(
            Profile(sp.profiles(k), [&] { return absl::StrCat(sp_path(), ".profiles[", k, "]"); }));
      }
    }
    return absl::OkStatus();
  }

 private:
  // A path with `suffix` appended, built only when asked for.
  class Field {
   public:
    Field(Path base, absl::string_view suffix) : base_(base), suffix_(suffix) {}
    std::string operator()() const { return absl::StrCat(base_(), suffix_); }

   private:
    Path base_;
    absl::string_view suffix_;
  };

  absl::Status Index(int64_t index, int size, absl::string_view table, Path where) const {
    if (index >= 0 && index < size) return absl::OkStatus();
    return Violation(absl::StrCat(where(), " = ", index, " is out of range (", table, " has ", size,
                                  size == 1 ? " entry)" : " entries)"));
  }

  absl::Status StringIndex(int64_t index, Path where) const {
    return Index(index, d_.string_table_size(), "string_table", where);
  }

  absl::Status AttributeIndices(const Indices& indices, Path owner) const {
    for (int k = 0; k < indices.size(); ++k) {
      RETURN_IF_ERROR(Index(indices[k], d_.attribute_table_size(), "attribute_table",
                            [&] { return absl::StrCat(owner(), ".attribute_indices[", k, "]"); }));
    }
    return absl::OkStatus();
  }

  // An attribute collection names each key once (indices already in range).
  absl::Status KeysOnce(const Indices& indices, Path owner) const {
    for (int k = 1; k < indices.size(); ++k) {
      const int32_t key = d_.attribute_table(indices[k]).key_strindex();
      for (int j = 0; j < k; ++j) {
        if (d_.attribute_table(indices[j]).key_strindex() == key) {
          return Violation(absl::StrCat(owner(), ".attribute_indices[", k, "] repeats the key \"",
                                        ToValidUtf8(d_.string_table(key)),
                                        "\" of attribute_indices[", j, "]"));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status ValueType(const profiles_pb::ValueType& vt, Path where) const {
    RETURN_IF_ERROR(StringIndex(vt.type_strindex(), Field(where, ".type_strindex")));
    return StringIndex(vt.unit_strindex(), Field(where, ".unit_strindex"));
  }

  // A value inside the dictionary: the *_strindex forms are allowed and must be in range.
  absl::Status DictionaryValue(const common_pb::AnyValue& v, Path where) const {
    switch (v.value_case()) {
      case common_pb::AnyValue::kStringValue:
        return Utf8(v.string_value(), Field(where, ".string_value"));
      case common_pb::AnyValue::kStringValueStrindex:
        return StringIndex(v.string_value_strindex(), Field(where, ".string_value_strindex"));
      case common_pb::AnyValue::kArrayValue:
        for (int k = 0; k < v.array_value().values_size(); ++k) {
          RETURN_IF_ERROR(DictionaryValue(v.array_value().values(k), [&] {
            return absl::StrCat(where(), ".array_value.values[", k, "]");
          }));
        }
        return absl::OkStatus();
      case common_pb::AnyValue::kKvlistValue:
        for (int k = 0; k < v.kvlist_value().values_size(); ++k) {
          const common_pb::KeyValue& kv = v.kvlist_value().values(k);
          const auto path = [&] { return absl::StrCat(where(), ".kvlist_value.values[", k, "]"); };
          RETURN_IF_ERROR(Utf8(kv.key(), Field(path, ".key")));
          RETURN_IF_ERROR(StringIndex(kv.key_strindex(), Field(path, ".key_strindex")));
          RETURN_IF_ERROR(DictionaryValue(kv.value(), Field(path, ".value")));
        }
        return absl::OkStatus();
      default:
        return absl::OkStatus();
    }
  }

  // Resource and Scope attributes: Pyroscope reads only the plain key and string_value.
  static absl::Status PlainAttributes(
      const google::protobuf::RepeatedPtrField<common_pb::KeyValue>& attrs, Path owner) {
    absl::flat_hash_map<absl::string_view, int> seen;
    for (int k = 0; k < attrs.size(); ++k) {
      const common_pb::KeyValue& kv = attrs[k];
      const auto path = [&] { return absl::StrCat(owner(), ".attributes[", k, "]"); };
      RETURN_IF_ERROR(PlainKeyValue(kv, path));
      auto [it, inserted] = seen.try_emplace(kv.key(), k);
      if (!inserted) {
        return Violation(absl::StrCat(path(), " repeats the key \"", kv.key(), "\" of attributes[",
                                      it->second, "]"));
      }
    }
    return absl::OkStatus();
  }

  static absl::Status PlainKeyValue(const common_pb::KeyValue& kv, Path where) {
    if (kv.key_strindex() != 0) {
      return Violation(absl::StrCat(where(), " uses key_strindex; Resource and Scope attributes ",
                                    "must use the plain key"));
    }
    if (kv.key().empty()) return Violation(absl::StrCat(where(), " has an empty key"));
    RETURN_IF_ERROR(Utf8(kv.key(), Field(where, ".key")));
    return PlainValue(kv.value(), Field(where, ".value"));
  }

  static absl::Status PlainValue(const common_pb::AnyValue& v, Path where) {
    switch (v.value_case()) {
      case common_pb::AnyValue::kStringValue:
        return Utf8(v.string_value(), Field(where, ".string_value"));
      case common_pb::AnyValue::kStringValueStrindex:
        return Violation(absl::StrCat(where(), " uses string_value_strindex; Resource and Scope ",
                                      "attributes must use string_value"));
      case common_pb::AnyValue::kArrayValue:
        for (int k = 0; k < v.array_value().values_size(); ++k) {
          RETURN_IF_ERROR(PlainValue(v.array_value().values(k), [&] {
            return absl::StrCat(where(), ".array_value.values[", k, "]");
          }));
        }
        return absl::OkStatus();
      case common_pb::AnyValue::kKvlistValue:
        for (int k = 0; k < v.kvlist_value().values_size(); ++k) {
          RETURN_IF_ERROR(PlainKeyValue(v.kvlist_value().values(k), [&] {
            return absl::StrCat(where(), ".kvlist_value.values[", k, "]");
          }));
        }
        return absl::OkStatus();
      default:
        return absl::OkStatus();
    }
  }

  absl::Status Profile(const profiles_pb::Profile& p, Path path) const {
    RETURN_IF_ERROR(ValueType(p.sample_type(), Field(path, ".sample_type")));
    RETURN_IF_ERROR(ValueType(p.period_type(), Field(path, ".period_type")));
    RETURN_IF_ERROR(AttributeIndices(p.attribute_indices(), path));
    if (!p.profile_id().empty() && p.profile_id().size() != 16) {
      return Violation(absl::StrCat(path(), ".profile_id has ", p.profile_id().size(),
                                    " bytes; it must have 16 (or be empty)"));
    }
    for (int s = 0; s < p.samples_size(); ++s) {
      const profiles_pb::Sample& sample = p.samples(s);
      const auto sample_path = [&] { return absl::StrCat(path(), ".samples[", s, "]"); };
      RETURN_IF_ERROR(Index(sample.stack_index(), d_.stack_table_size(), "stack_table",
                            Field(sample_path, ".stack_index")));
      RETURN_IF_ERROR(AttributeIndices(sample.attribute_indices(), sample_path));
      RETURN_IF_ERROR(KeysOnce(sample.attribute_indices(), sample_path));
      RETURN_IF_ERROR(Index(sample.link_index(), d_.link_table_size(), "link_table",
                            Field(sample_path, ".link_index")));
      const int values = sample.values_size();
      const int timestamps = sample.timestamps_unix_nano_size();
      if (values == 0 && timestamps == 0) {
        return Violation(
            absl::StrCat(sample_path(), " has neither values nor timestamps_unix_nano"));
      }
      if (values != 0 && timestamps != 0 && values != timestamps) {
        return Violation(absl::StrCat(sample_path(), " has ", values, " values and ", timestamps,
                                      " timestamps_unix_nano; with both they must be as many"));
      }
      if (p.period() != 0 && values > 1) {
        return Violation(absl::StrCat(sample_path(), " has ", values,
                                      " values; with a period set a sample carries exactly one "
                                      "value (or timestamps only)"));
      }
    }
    return absl::OkStatus();
  }

  const profiles_pb::ProfilesDictionary& d_;
};

}  // namespace

absl::Status ValidateExportRequest(const collector_pb::ExportProfilesServiceRequest& request) {
  Validator validator(request.dictionary());
  RETURN_IF_ERROR(validator.Dictionary());
  for (int i = 0; i < request.resource_profiles_size(); ++i) {
    RETURN_IF_ERROR(validator.ResourceProfiles(request.resource_profiles(i), i));
  }
  return absl::OkStatus();
}

}  // namespace ember
