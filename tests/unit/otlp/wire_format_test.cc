// The bytes on the wire: hand-checked encodings of every OTLP Profiles message, and a built
// request decoded without our schema (protobuf's UnknownFieldSet). A wrong field number, type or
// package in proto/ fails here instead of in a collector that silently reads wrong values.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.grpc.pb.h"
#include "otlp/profiles_builder.h"
#include "support/test_samples.h"

namespace ember {
namespace {

using ::ember::testing::AddSamples;

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;
namespace common_pb = opentelemetry::proto::common::v1;
namespace profiles_pb = opentelemetry::proto::profiles::v1development;
namespace resource_pb = opentelemetry::proto::resource::v1;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Hex of the serialized message, for readable failures.
std::string Wire(const google::protobuf::Message& m) {
  return absl::BytesToHexString(m.SerializeAsString());
}

std::string Repeat(const char* hex_byte, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += hex_byte;
  return out;
}

TEST(WireFormatTest, Sample) {
  profiles_pb::Sample s;
  s.set_stack_index(1);
  s.add_attribute_indices(2);
  s.set_link_index(3);
  s.add_values(5);
  s.add_timestamps_unix_nano(7);  // fixed64, packed
  EXPECT_EQ(Wire(s),
            "0801"
            "120102"
            "1803"
            "220105"
            "2a08"
            "0700000000000000");
}

TEST(WireFormatTest, Profile) {
  profiles_pb::Profile p;
  p.mutable_sample_type()->set_type_strindex(1);
  p.mutable_sample_type()->set_unit_strindex(2);
  p.add_samples()->set_stack_index(1);
  p.set_time_unix_nano(3);  // fixed64
  p.set_duration_nano(4);
  p.mutable_period_type()->set_type_strindex(3);
  p.mutable_period_type()->set_unit_strindex(4);
  p.set_period(5);
  p.set_profile_id(std::string(16, '\x11'));
  p.set_dropped_attributes_count(6);
  p.set_original_payload_format("f");
  p.set_original_payload("p");
  p.add_attribute_indices(7);
  EXPECT_EQ(Wire(p),
            "0a0408011002"
            "12020801"
            "19"
            "0300000000000000"
            "2004"
            "2a0408031004"
            "3005"
            "3a10" +
                Repeat("11", 16) +
                "4006"
                "4a0166"
                "520170"
                "5a0107");
}

TEST(WireFormatTest, DictionaryAndRequestContainers) {
  profiles_pb::ProfilesDictionary d;
  d.add_mapping_table();
  d.add_location_table();
  d.add_function_table();
  d.add_link_table();
  d.add_string_table("");
  d.add_attribute_table();
  d.add_stack_table();
  EXPECT_EQ(Wire(d),
            "0a00"
            "1200"
            "1a00"
            "2200"
            "2a00"
            "3200"
            "3a00");

  collector_pb::ExportProfilesServiceRequest request;
  request.add_resource_profiles();
  request.mutable_dictionary();
  EXPECT_EQ(Wire(request),
            "0a00"
            "1200");
  profiles_pb::ProfilesData data;
  data.add_resource_profiles();
  data.mutable_dictionary();
  EXPECT_EQ(Wire(data),
            "0a00"
            "1200");

  profiles_pb::ResourceProfiles rp;
  rp.mutable_resource();
  rp.add_scope_profiles();
  rp.set_schema_url("s");
  EXPECT_EQ(Wire(rp),
            "0a00"
            "1200"
            "1a0173");
  profiles_pb::ScopeProfiles sp;
  sp.mutable_scope();
  sp.add_profiles();
  sp.set_schema_url("s");
  EXPECT_EQ(Wire(sp),
            "0a00"
            "1200"
            "1a0173");

  collector_pb::ExportProfilesServiceResponse response;
  response.mutable_partial_success()->set_rejected_profiles(1);
  response.mutable_partial_success()->set_error_message("e");
  EXPECT_EQ(Wire(response),
            "0a05"
            "0801"
            "120165");
}

TEST(WireFormatTest, DictionaryEntries) {
  profiles_pb::Mapping m;
  m.set_memory_start(1);
  m.set_memory_limit(2);
  m.set_file_offset(3);
  m.set_filename_strindex(4);
  m.add_attribute_indices(5);
  EXPECT_EQ(Wire(m),
            "0801"
            "1002"
            "1803"
            "2004"
            "2a0105");

  profiles_pb::Location loc;
  loc.set_mapping_index(1);
  loc.set_address(2);
  profiles_pb::Line* line = loc.add_lines();
  line->set_function_index(3);
  line->set_line(4);
  line->set_column(5);
  loc.add_attribute_indices(6);
  EXPECT_EQ(Wire(loc),
            "0801"
            "1002"
            "1a06"
            "0803"
            "1004"
            "1805"
            "220106");

  profiles_pb::Function fn;
  fn.set_name_strindex(1);
  fn.set_system_name_strindex(2);
  fn.set_filename_strindex(3);
  fn.set_start_line(4);
  EXPECT_EQ(Wire(fn),
            "0801"
            "1002"
            "1803"
            "2004");

  profiles_pb::Link link;
  link.set_trace_id(std::string(16, '\xaa'));
  link.set_span_id(std::string(8, '\xbb'));
  EXPECT_EQ(Wire(link), "0a10" + Repeat("aa", 16) + "1208" + Repeat("bb", 8));

  profiles_pb::ValueType vt;
  vt.set_type_strindex(1);
  vt.set_unit_strindex(2);
  EXPECT_EQ(Wire(vt),
            "0801"
            "1002");

  profiles_pb::Stack stack;
  stack.add_location_indices(1);
  stack.add_location_indices(2);
  EXPECT_EQ(Wire(stack), "0a020102");

  profiles_pb::KeyValueAndUnit kvu;
  kvu.set_key_strindex(1);
  kvu.mutable_value()->set_string_value("x");
  kvu.set_unit_strindex(3);
  EXPECT_EQ(Wire(kvu),
            "0801"
            "1203"
            "0a0178"
            "1803");
}

TEST(WireFormatTest, CommonAndResource) {
  const auto any = [](auto set) {
    common_pb::AnyValue v;
    set(v);
    return Wire(v);
  };
  EXPECT_EQ(any([](auto& v) { v.set_string_value("a"); }), "0a0161");
  EXPECT_EQ(any([](auto& v) { v.set_bool_value(true); }), "1001");
  EXPECT_EQ(any([](auto& v) { v.set_int_value(7); }), "1807");
  EXPECT_EQ(any([](auto& v) { v.set_double_value(1.0); }), "21000000000000f03f");
  EXPECT_EQ(any([](auto& v) { v.mutable_array_value()->add_values(); }), "2a020a00");
  EXPECT_EQ(any([](auto& v) { v.mutable_kvlist_value()->add_values(); }), "32020a00");
  EXPECT_EQ(any([](auto& v) { v.set_bytes_value("b"); }), "3a0162");
  EXPECT_EQ(any([](auto& v) { v.set_string_value_strindex(3); }), "4003");
  // A oneof: setting one member clears the other.
  common_pb::AnyValue v;
  v.set_string_value("a");
  v.set_int_value(1);
  EXPECT_EQ(Wire(v), "1801");

  common_pb::KeyValue kv;
  kv.set_key("k");
  kv.mutable_value()->set_int_value(1);
  kv.set_key_strindex(2);
  EXPECT_EQ(Wire(kv),
            "0a016b"
            "12021801"
            "1802");

  common_pb::InstrumentationScope scope;
  scope.set_name("n");
  scope.set_version("v");
  scope.add_attributes();
  scope.set_dropped_attributes_count(2);
  EXPECT_EQ(Wire(scope),
            "0a016e"
            "120176"
            "1a00"
            "2002");

  common_pb::EntityRef ref;
  ref.set_schema_url("s");
  ref.set_type("t");
  ref.add_id_keys("i");
  ref.add_description_keys("d");
  EXPECT_EQ(Wire(ref),
            "0a0173"
            "120174"
            "1a0169"
            "220164");

  resource_pb::Resource resource;
  resource.add_attributes();
  resource.set_dropped_attributes_count(1);
  resource.add_entity_refs();
  EXPECT_EQ(Wire(resource),
            "0a00"
            "1001"
            "1a00");
}

TEST(WireFormatTest, PackagesServiceAndReservedField) {
  EXPECT_EQ(collector_pb::ExportProfilesServiceRequest::descriptor()->full_name(),
            "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest");
  EXPECT_EQ(profiles_pb::Profile::descriptor()->full_name(),
            "opentelemetry.proto.profiles.v1development.Profile");
  EXPECT_EQ(common_pb::AnyValue::descriptor()->full_name(),
            "opentelemetry.proto.common.v1.AnyValue");
  EXPECT_EQ(resource_pb::Resource::descriptor()->full_name(),
            "opentelemetry.proto.resource.v1.Resource");
  EXPECT_EQ(common_pb::AnyValue::descriptor()->FindOneofByName("value")->field_count(), 8);
  EXPECT_TRUE(profiles_pb::ResourceProfiles::descriptor()->IsReservedNumber(1000));

  EXPECT_EQ(std::string(collector_pb::ProfilesService::service_full_name()),
            "opentelemetry.proto.collector.profiles.v1development.ProfilesService");
  const google::protobuf::ServiceDescriptor* service =
      collector_pb::ExportProfilesServiceRequest::descriptor()->file()->FindServiceByName(
          "ProfilesService");
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(service->method_count(), 1);
  const google::protobuf::MethodDescriptor* method = service->method(0);
  // The HTTP/2 path a gRPC client posts to.
  EXPECT_EQ("/" + service->full_name() + "/" + method->name(),
            "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export");
  EXPECT_EQ(method->input_type(), collector_pb::ExportProfilesServiceRequest::descriptor());
  EXPECT_EQ(method->output_type(), collector_pb::ExportProfilesServiceResponse::descriptor());
  EXPECT_FALSE(method->client_streaming() || method->server_streaming());
}

// Decodes `bytes` with no schema.
std::unique_ptr<UnknownFieldSet> Fields(const std::string& bytes) {
  auto set = std::make_unique<UnknownFieldSet>();
  EXPECT_TRUE(set->ParseFromString(bytes));
  return set;
}

// The fields numbered `number`, all of which must have wire type `type`.
std::vector<const UnknownField*> Numbered(const std::unique_ptr<UnknownFieldSet>& fields,
                                          int number, UnknownField::Type type) {
  const UnknownFieldSet& set = *fields;
  std::vector<const UnknownField*> out;
  for (int i = 0; i < set.field_count(); ++i) {
    if (set.field(i).number() != number) continue;
    EXPECT_EQ(set.field(i).type(), type) << "field " << number;
    out.push_back(&set.field(i));
  }
  return out;
}

TEST(WireFormatTest, BuiltRequestDecodesWithoutTheSchema) {
  Frame leaf{FrameKind::kNative, "leaf", "a.c", 3, 0x10, "/bin/a", "beef"};
  IntervalProfile profile;
  profile.start_unix_ns = 1'700'000'000'000'000'000;
  profile.duration_ns = 10'000'000'000;
  profile.period_ns = 52'631'578;
  AddSamples(profile, {{7, "a", "t", {&leaf}, 4}, {8, "b", "u", {&leaf}, 2}});
  const auto request = BuildExportRequest(profile, ResourceContext{});
  const auto& d = request.dictionary();
  constexpr auto kLen = UnknownField::TYPE_LENGTH_DELIMITED;
  constexpr auto kVarint = UnknownField::TYPE_VARINT;

  const auto top = Fields(request.SerializeAsString());
  const auto resource_profiles = Numbered(top, 1, kLen);
  ASSERT_EQ(resource_profiles.size(), 2u);
  const auto dictionary = Numbered(top, 2, kLen);
  ASSERT_EQ(dictionary.size(), 1u);
  EXPECT_EQ(top->field_count(), 3);

  const auto dict = Fields(dictionary[0]->length_delimited());
  EXPECT_EQ(Numbered(dict, 1, kLen).size(), static_cast<size_t>(d.mapping_table_size()));
  EXPECT_EQ(Numbered(dict, 2, kLen).size(), static_cast<size_t>(d.location_table_size()));
  EXPECT_EQ(Numbered(dict, 3, kLen).size(), static_cast<size_t>(d.function_table_size()));
  EXPECT_EQ(Numbered(dict, 4, kLen).size(), static_cast<size_t>(d.link_table_size()));
  const auto strings = Numbered(dict, 5, kLen);
  ASSERT_EQ(strings.size(), static_cast<size_t>(d.string_table_size()));
  EXPECT_EQ(strings[0]->length_delimited(), "");
  EXPECT_EQ(Numbered(dict, 6, kLen).size(), static_cast<size_t>(d.attribute_table_size()));
  EXPECT_EQ(Numbered(dict, 7, kLen).size(), static_cast<size_t>(d.stack_table_size()));

  const auto rp = Fields(resource_profiles[0]->length_delimited());
  const auto resource = Fields(Numbered(rp, 1, kLen).at(0)->length_delimited());
  bool saw_pid = false;
  for (const UnknownField* attr : Numbered(resource, 1, kLen)) {
    const auto kv = Fields(attr->length_delimited());
    if (Numbered(kv, 1, kLen).at(0)->length_delimited() != "process.pid") continue;
    const auto value = Fields(Numbered(kv, 2, kLen).at(0)->length_delimited());
    EXPECT_EQ(Numbered(value, 3, kVarint).at(0)->varint(), 7u);  // AnyValue.int_value
    saw_pid = true;
  }
  EXPECT_TRUE(saw_pid);

  const auto sp = Fields(Numbered(rp, 2, kLen).at(0)->length_delimited());
  const auto scope = Fields(Numbered(sp, 1, kLen).at(0)->length_delimited());
  EXPECT_EQ(Numbered(scope, 1, kLen).at(0)->length_delimited(), "ember");
  const auto p = Fields(Numbered(sp, 2, kLen).at(0)->length_delimited());
  EXPECT_EQ(Numbered(p, 3, UnknownField::TYPE_FIXED64).at(0)->fixed64(),
            static_cast<uint64_t>(profile.start_unix_ns));
  EXPECT_EQ(Numbered(p, 4, kVarint).at(0)->varint(), static_cast<uint64_t>(profile.duration_ns));
  EXPECT_EQ(Numbered(p, 6, kVarint).at(0)->varint(), static_cast<uint64_t>(profile.period_ns));
  EXPECT_EQ(Numbered(p, 7, kLen).at(0)->length_delimited().size(), 16u);
  const auto sample = Fields(Numbered(p, 2, kLen).at(0)->length_delimited());
  EXPECT_EQ(Numbered(sample, 1, kVarint).at(0)->varint(), 1u);  // stack_index
  // values: packed int64 [4].
  EXPECT_EQ(Numbered(sample, 4, kLen).at(0)->length_delimited(), std::string("\x04"));
}

}  // namespace
}  // namespace ember
