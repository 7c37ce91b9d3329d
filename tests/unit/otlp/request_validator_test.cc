// ValidateExportRequest: a small hand-made request passes, and breaking it one rule at a time
// gives an InvalidArgument that names the place and the rule in one line.
#include "otlp/request_validator.h"

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;
namespace profiles_pb = opentelemetry::proto::profiles::v1development;
using Request = collector_pb::ExportProfilesServiceRequest;

// string_table indices of ValidRequest().
enum : int32_t { kSamples = 1, kCount, kCpu, kNanoseconds, kMain, kBinary, kThreadName, kSize };

// One process, one sample: stack [location 1] -> function "main" in mapping "/bin/x".
Request ValidRequest() {
  Request r;
  profiles_pb::ProfilesDictionary* d = r.mutable_dictionary();
  for (const char* s :
       {"", "samples", "count", "cpu", "nanoseconds", "main", "/bin/x", "thread.name"}) {
    d->add_string_table(s);
  }
  d->add_mapping_table();
  d->add_mapping_table()->set_filename_strindex(kBinary);
  d->add_function_table();
  d->add_function_table()->set_name_strindex(kMain);
  d->add_location_table();
  profiles_pb::Location* loc = d->add_location_table();
  loc->set_mapping_index(1);
  loc->set_address(0x1234);
  loc->add_lines()->set_function_index(1);
  d->add_link_table();
  d->add_attribute_table();
  profiles_pb::KeyValueAndUnit* thread = d->add_attribute_table();
  thread->set_key_strindex(kThreadName);
  thread->mutable_value()->set_string_value("worker");
  d->add_stack_table();
  d->add_stack_table()->add_location_indices(1);

  profiles_pb::ResourceProfiles* rp = r.add_resource_profiles();
  auto* service = rp->mutable_resource()->add_attributes();
  service->set_key("service.name");
  service->mutable_value()->set_string_value("x");
  auto* pid = rp->mutable_resource()->add_attributes();
  pid->set_key("process.pid");
  pid->mutable_value()->set_int_value(42);
  profiles_pb::ScopeProfiles* sp = rp->add_scope_profiles();
  sp->mutable_scope()->set_name("ember");
  profiles_pb::Profile* p = sp->add_profiles();
  p->mutable_sample_type()->set_type_strindex(kSamples);
  p->mutable_sample_type()->set_unit_strindex(kCount);
  p->mutable_period_type()->set_type_strindex(kCpu);
  p->mutable_period_type()->set_unit_strindex(kNanoseconds);
  p->set_period(10'000'000);
  p->set_profile_id(std::string(16, '\x01'));
  profiles_pb::Sample* s = p->add_samples();
  s->set_stack_index(1);
  s->add_attribute_indices(1);
  s->add_values(3);
  return r;
}

profiles_pb::ProfilesDictionary& Dict(Request& r) { return *r.mutable_dictionary(); }
profiles_pb::Profile& Prof(Request& r) {
  return *r.mutable_resource_profiles(0)->mutable_scope_profiles(0)->mutable_profiles(0);
}
profiles_pb::Sample& Sample0(Request& r) { return *Prof(r).mutable_samples(0); }

constexpr char kSample[] = "resource_profiles[0].scope_profiles[0].profiles[0].samples[0]";

struct Case {
  std::string name;
  std::function<void(Request&)> break_it;
  std::string expected;  // a substring of the error
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string PrintCase(const testing::TestParamInfo<Case>& info) { return info.param.name; }

class BrokenRequestTest : public testing::TestWithParam<Case> {};

TEST_P(BrokenRequestTest, NamesTheFirstViolationInOneLine) {
  Request r = ValidRequest();
  GetParam().break_it(r);
  const absl::Status status = ValidateExportRequest(r);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr(GetParam().expected));
  EXPECT_EQ(status.message().find('\n'), absl::string_view::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(
    Rules, BrokenRequestTest,
    testing::ValuesIn(std::vector<Case>{
        // Index 0 of every table is the zero value, and every table has one.
        {"StringZero", [](Request& r) { Dict(r).set_string_table(0, "oops"); },
         "dictionary.string_table[0] is \"oops\"; it must be \"\""},
        {"NoDictionary", [](Request& r) { r.clear_dictionary(); },
         "dictionary.string_table is empty"},
        {"MappingZero", [](Request& r) { Dict(r).mutable_mapping_table(0)->set_memory_start(1); },
         "dictionary.mapping_table[0] is not the zero value: {memory_start: 1}"},
        {"LocationZero", [](Request& r) { Dict(r).mutable_location_table(0)->set_address(7); },
         "dictionary.location_table[0] is not the zero value"},
        {"FunctionZero", [](Request& r) { Dict(r).mutable_function_table(0)->set_start_line(3); },
         "dictionary.function_table[0] is not the zero value"},
        {"LinkZero",
         [](Request& r) { Dict(r).mutable_link_table(0)->set_span_id(std::string(8, 'a')); },
         "dictionary.link_table[0] is not the zero value"},
        {"AttributeZero",
         [](Request& r) { Dict(r).mutable_attribute_table(0)->set_key_strindex(kMain); },
         "dictionary.attribute_table[0] is not the zero value"},
        {"StackZero", [](Request& r) { Dict(r).mutable_stack_table(0)->add_location_indices(1); },
         "dictionary.stack_table[0] is not the zero value"},
        {"NoLinkTable", [](Request& r) { Dict(r).clear_link_table(); },
         "dictionary.link_table is empty; index 0 must hold the zero value"},
        // No duplicates.
        {"DuplicateString", [](Request& r) { Dict(r).add_string_table("main"); },
         "dictionary.string_table[8] duplicates string_table[5] (\"main\")"},
        {"DuplicateFunction",
         [](Request& r) { *Dict(r).add_function_table() = Dict(r).function_table(1); },
         "dictionary.function_table[2] duplicates function_table[1]"},
        {"DuplicateOfZeroValue", [](Request& r) { Dict(r).add_stack_table(); },
         "dictionary.stack_table[2] duplicates stack_table[0]"},
        {"DuplicateAttribute",
         [](Request& r) { *Dict(r).add_attribute_table() = Dict(r).attribute_table(1); },
         "dictionary.attribute_table[2] duplicates attribute_table[1]"},
        {"DuplicateMapping",
         [](Request& r) { *Dict(r).add_mapping_table() = Dict(r).mapping_table(1); },
         "dictionary.mapping_table[2] duplicates mapping_table[1]"},
        {"DuplicateLocation",
         [](Request& r) { *Dict(r).add_location_table() = Dict(r).location_table(1); },
         "dictionary.location_table[2] duplicates location_table[1]"},
        // Indices in range, inside the dictionary...
        {"MappingFilename",
         [](Request& r) { Dict(r).mutable_mapping_table(1)->set_filename_strindex(99); },
         "dictionary.mapping_table[1].filename_strindex = 99 is out of range (string_table has "
         "8 entries)"},
        {"MappingAttribute",
         [](Request& r) { Dict(r).mutable_mapping_table(1)->add_attribute_indices(2); },
         "dictionary.mapping_table[1].attribute_indices[0] = 2 is out of range (attribute_table "
         "has 2 entries)"},
        {"LocationMapping",
         [](Request& r) { Dict(r).mutable_location_table(1)->set_mapping_index(2); },
         "dictionary.location_table[1].mapping_index = 2 is out of range"},
        {"LineFunction",
         [](Request& r) {
           Dict(r).mutable_location_table(1)->mutable_lines(0)->set_function_index(-1);
         },
         "dictionary.location_table[1].lines[0].function_index = -1 is out of range "
         "(function_table has 2 entries)"},
        {"LocationAttribute",
         [](Request& r) { Dict(r).mutable_location_table(1)->add_attribute_indices(5); },
         "dictionary.location_table[1].attribute_indices[0] = 5 is out of range"},
        {"FunctionName",
         [](Request& r) { Dict(r).mutable_function_table(1)->set_name_strindex(kSize); },
         "dictionary.function_table[1].name_strindex = 8 is out of range"},
        {"FunctionSystemName",
         [](Request& r) { Dict(r).mutable_function_table(1)->set_system_name_strindex(-3); },
         "dictionary.function_table[1].system_name_strindex = -3"},
        {"FunctionFilename",
         [](Request& r) { Dict(r).mutable_function_table(1)->set_filename_strindex(100); },
         "dictionary.function_table[1].filename_strindex = 100"},
        {"AttributeKey",
         [](Request& r) { Dict(r).mutable_attribute_table(1)->set_key_strindex(50); },
         "dictionary.attribute_table[1].key_strindex = 50 is out of range"},
        {"AttributeUnit",
         [](Request& r) { Dict(r).mutable_attribute_table(1)->set_unit_strindex(50); },
         "dictionary.attribute_table[1].unit_strindex = 50"},
        {"AttributeValueStrindex",
         [](Request& r) {
           Dict(r).mutable_attribute_table(1)->mutable_value()->set_string_value_strindex(9);
         },
         "dictionary.attribute_table[1].value.string_value_strindex = 9 is out of range"},
        {"AttributeNestedValue",
         [](Request& r) {
           auto* kv = Dict(r)
                          .mutable_attribute_table(1)
                          ->mutable_value()
                          ->mutable_kvlist_value()
                          ->add_values();
           kv->set_key_strindex(kMain);
           kv->mutable_value()->mutable_array_value()->add_values()->set_string_value_strindex(40);
         },
         "dictionary.attribute_table[1].value.kvlist_value.values[0].value.array_value."
         "values[0].string_value_strindex = 40"},
        {"StackLocation",
         [](Request& r) { Dict(r).mutable_stack_table(1)->add_location_indices(2); },
         "dictionary.stack_table[1].location_indices[1] = 2 is out of range (location_table has "
         "2 entries)"},
        {"LinkLengths",
         [](Request& r) {
           auto* link = Dict(r).add_link_table();
           link->set_trace_id(std::string(16, 't'));
           link->set_span_id("span");
         },
         "dictionary.link_table[1] has a 16-byte trace_id and a 4-byte span_id"},
        {"LinkZeroTrace",
         [](Request& r) {
           auto* link = Dict(r).add_link_table();
           link->set_trace_id(std::string(16, '\0'));
           link->set_span_id(std::string(8, 's'));
           Sample0(r).set_link_index(1);
         },
         "dictionary.link_table[1] has an all-zero trace_id"},
        {"StringNotUtf8", [](Request& r) { Dict(r).set_string_table(kMain, "ma\xFFin"); },
         "dictionary.string_table[5] is not valid UTF-8"},
        // ...and in the profiles.
        {"SampleStack", [](Request& r) { Sample0(r).set_stack_index(2); },
         std::string(kSample) + ".stack_index = 2 is out of range (stack_table has 2 entries)"},
        {"SampleAttribute", [](Request& r) { Sample0(r).add_attribute_indices(7); },
         std::string(kSample) + ".attribute_indices[1] = 7 is out of range"},
        {"SampleLink", [](Request& r) { Sample0(r).set_link_index(1); },
         std::string(kSample) + ".link_index = 1 is out of range (link_table has 1 entry)"},
        {"SampleRepeatedKey",
         [](Request& r) {
           auto* again = Dict(r).add_attribute_table();
           again->set_key_strindex(kThreadName);
           again->mutable_value()->set_string_value("other");
           Sample0(r).add_attribute_indices(2);
         },
         std::string(kSample) +
             ".attribute_indices[1] repeats the key \"thread.name\" of attribute_indices[0]"},
        {"SampleTypeUnit",
         [](Request& r) { Prof(r).mutable_sample_type()->set_unit_strindex(kSize); },
         "resource_profiles[0].scope_profiles[0].profiles[0].sample_type.unit_strindex = 8"},
        {"PeriodType", [](Request& r) { Prof(r).mutable_period_type()->set_type_strindex(-1); },
         "profiles[0].period_type.type_strindex = -1"},
        {"ProfileAttribute", [](Request& r) { Prof(r).add_attribute_indices(3); },
         "profiles[0].attribute_indices[0] = 3 is out of range"},
        {"ProfileId", [](Request& r) { Prof(r).set_profile_id("short"); },
         "profiles[0].profile_id has 5 bytes; it must have 16"},
        // Values and timestamps.
        {"NoValues", [](Request& r) { Sample0(r).clear_values(); },
         std::string(kSample) + " has neither values nor timestamps_unix_nano"},
        {"UnequalLengths",
         [](Request& r) {
           Sample0(r).add_timestamps_unix_nano(1);
           Sample0(r).add_timestamps_unix_nano(2);
         },
         std::string(kSample) + " has 1 values and 2 timestamps_unix_nano"},
        {"TwoValuesWithPeriod", [](Request& r) { Sample0(r).add_values(30'000'000); },
         std::string(kSample) +
             " has 2 values; with a period set a sample carries exactly one value"},
        // Resource and Scope attributes in plain form.
        {"ResourceKeyStrindex",
         [](Request& r) {
           r.mutable_resource_profiles(0)
               ->mutable_resource()
               ->mutable_attributes(0)
               ->set_key_strindex(kMain);
         },
         "resource_profiles[0].resource.attributes[0] uses key_strindex; Resource and Scope "
         "attributes must use the plain key"},
        {"ResourceValueStrindex",
         [](Request& r) {
           r.mutable_resource_profiles(0)
               ->mutable_resource()
               ->mutable_attributes(0)
               ->mutable_value()
               ->set_string_value_strindex(kMain);
         },
         "resource_profiles[0].resource.attributes[0].value uses string_value_strindex"},
        {"ResourceEmptyKey",
         [](Request& r) {
           r.mutable_resource_profiles(0)->mutable_resource()->mutable_attributes(1)->clear_key();
         },
         "resource_profiles[0].resource.attributes[1] has an empty key"},
        {"ResourceRepeatedKey",
         [](Request& r) {
           r.mutable_resource_profiles(0)->mutable_resource()->mutable_attributes(1)->set_key(
               "service.name");
         },
         "resource_profiles[0].resource.attributes[1] repeats the key \"service.name\" of "
         "attributes[0]"},
        {"ScopeKeyStrindex",
         [](Request& r) {
           r.mutable_resource_profiles(0)
               ->mutable_scope_profiles(0)
               ->mutable_scope()
               ->add_attributes()
               ->set_key_strindex(kMain);
         },
         "resource_profiles[0].scope_profiles[0].scope.attributes[0] uses key_strindex"},
        {"ScopeNotUtf8",
         [](Request& r) {
           r.mutable_resource_profiles(0)->mutable_scope_profiles(0)->mutable_scope()->set_version(
               "\xC0\x80");
         },
         "resource_profiles[0].scope_profiles[0].scope.version is not valid UTF-8"},
    }),
    PrintCase);

TEST(ValidateExportRequestTest, AcceptsTheValidRequest) {
  EXPECT_TRUE(ValidateExportRequest(ValidRequest()).ok()) << ValidateExportRequest(ValidRequest());
}

TEST(ValidateExportRequestTest, AcceptsASampleWithALinkAndMoreAttributes) {
  Request r = ValidRequest();
  auto* link = Dict(r).add_link_table();
  link->set_trace_id(std::string(15, '\0') + "\x01");
  link->set_span_id(std::string(8, '\0'));
  Sample0(r).set_link_index(1);
  Dict(r).add_string_table("http.route");
  auto* route = Dict(r).add_attribute_table();
  route->set_key_strindex(kSize);
  route->mutable_value()->set_string_value("/checkout");
  Sample0(r).add_attribute_indices(2);
  EXPECT_TRUE(ValidateExportRequest(r).ok()) << ValidateExportRequest(r);
}

TEST(ValidateExportRequestTest, AcceptsTimestampsOnlyWithAPeriodAndSeveralValuesWithout) {
  Request timestamps_only = ValidRequest();
  Sample0(timestamps_only).clear_values();
  Sample0(timestamps_only).add_timestamps_unix_nano(1);
  Sample0(timestamps_only).add_timestamps_unix_nano(2);
  EXPECT_TRUE(ValidateExportRequest(timestamps_only).ok())
      << ValidateExportRequest(timestamps_only);

  Request both = ValidRequest();
  Sample0(both).add_timestamps_unix_nano(5);
  EXPECT_TRUE(ValidateExportRequest(both).ok()) << ValidateExportRequest(both);

  Request no_period = ValidRequest();
  Prof(no_period).clear_period();
  Sample0(no_period).add_values(30'000'000);
  EXPECT_TRUE(ValidateExportRequest(no_period).ok()) << ValidateExportRequest(no_period);
}

TEST(ValidateExportRequestTest, AcceptsAnEmptyRequestWithZeroValueTables) {
  Request r = ValidRequest();
  r.clear_resource_profiles();
  EXPECT_TRUE(ValidateExportRequest(r).ok());
}

TEST(ValidateExportRequestTest, ReportsTheFirstViolation) {
  Request r = ValidRequest();
  Sample0(r).set_stack_index(9);
  Dict(r).set_string_table(0, "x");  // the dictionary is checked before the samples
  EXPECT_THAT(std::string(ValidateExportRequest(r).message()),
              testing::StartsWith("dictionary.string_table[0]"));
}

}  // namespace
}  // namespace ember
