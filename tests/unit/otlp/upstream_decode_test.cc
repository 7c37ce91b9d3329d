// The builder's requests as the published opentelemetry-proto v1.11.0 schema reads them (protoc
// --decode against the upstream files): a sample's link and attributes and the process's published
// resource attributes are where a receiver built from that schema looks for them.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "otlp/profiles_builder.h"
#include "otlp/request_validator.h"
#include "support/test_samples.h"
#include "support/upstream_otlp.h"

namespace ember {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;
namespace profiles_pb = opentelemetry::proto::profiles::v1development;
using ::ember::testing::AddSamples;
using ::testing::HasSubstr;

std::string Bytes(std::span<const uint8_t> id) {
  return std::string(reinterpret_cast<const char*>(id.data()), id.size());
}

TEST(UpstreamDecodeTest, LinksAndAttributesReadAsTheUpstreamSchemaDoes) {
  Frame work{.function = "work", .address = 0x10, .module = "/app"};
  const TraceLink checkout =
      testing::LinkOf("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
  const TraceLink search = testing::LinkOf("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
  IntervalProfile profile;
  profile.period_ns = 10'000'000;
  AddSamples(profile, {{7, "app", "a", {&work}, 2, checkout, {{"http.route", "/checkout"}}},
                       {7, "app", "b", {&work}, 3, search, {{"http.route", "/search"}}},
                       {7, "app", "a", {&work}, 4}});
  profile.AttachProcessMetadata(
      7, {.service_name = "derived",
          .published = {
              {"service.name", "checkout"}, {"service.version", "1.4.2"}, {"process.pid", "1"}}});
  const collector_pb::ExportProfilesServiceRequest built =
      BuildExportRequest(profile, ResourceContext{});
  ASSERT_TRUE(ValidateExportRequest(built).ok()) << ValidateExportRequest(built);

  const std::string serialized = built.SerializeAsString();
  const absl::StatusOr<std::string> text = testing::DecodeWithUpstreamProtos(serialized);
  ASSERT_TRUE(text.ok()) << text.status();
  // The upstream names of the fields Ember writes the context into.
  EXPECT_THAT(*text, HasSubstr("link_table {"));
  EXPECT_THAT(*text, HasSubstr("link_index: 1"));
  EXPECT_THAT(*text, HasSubstr("link_index: 2"));

  const auto read = testing::ReadWithUpstreamProtos(serialized);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(ValidateExportRequest(*read).ok()) << ValidateExportRequest(*read);
  const profiles_pb::ProfilesDictionary& dict = read->dictionary();
  ASSERT_EQ(read->resource_profiles_size(), 1);
  std::map<std::string, std::string> resource;
  for (const auto& kv : read->resource_profiles(0).resource().attributes()) {
    resource[kv.key()] = kv.value().has_int_value() ? std::to_string(kv.value().int_value())
                                                    : kv.value().string_value();
  }
  EXPECT_EQ(resource["service.name"], "checkout");
  EXPECT_EQ(resource["service.version"], "1.4.2");
  EXPECT_EQ(resource["process.pid"], "7");

  const profiles_pb::Profile& p = read->resource_profiles(0).scope_profiles(0).profiles(0);
  ASSERT_EQ(p.samples_size(), 3);
  // Per sample: (trace id, span id) of its link, and its attributes.
  std::vector<std::pair<std::pair<std::string, std::string>, std::map<std::string, std::string>>>
      seen;
  for (const profiles_pb::Sample& s : p.samples()) {
    ASSERT_LT(s.link_index(), dict.link_table_size());
    const profiles_pb::Link& link = dict.link_table(s.link_index());
    std::map<std::string, std::string> attributes;
    for (int32_t i : s.attribute_indices()) {
      const auto& kv = dict.attribute_table(i);
      attributes[dict.string_table(kv.key_strindex())] = kv.value().string_value();
    }
    seen.push_back({{link.trace_id(), link.span_id()}, attributes});
  }
  using Attrs = std::map<std::string, std::string>;
  EXPECT_EQ(seen[0].first, std::make_pair(Bytes(checkout.trace_id), Bytes(checkout.span_id)));
  EXPECT_EQ(seen[0].second, (Attrs{{"thread.name", "a"}, {"http.route", "/checkout"}}));
  EXPECT_EQ(seen[1].first, std::make_pair(Bytes(search.trace_id), Bytes(search.span_id)));
  EXPECT_EQ(seen[1].second, (Attrs{{"thread.name", "b"}, {"http.route", "/search"}}));
  EXPECT_EQ(seen[2].first, std::make_pair(std::string(), std::string()));  // the zero link
  EXPECT_EQ(seen[2].second, (Attrs{{"thread.name", "a"}}));
}

// A field the upstream schema does not have (here an unknown number on the request) does not pass
// for a read: the helper fails rather than hiding it.
TEST(UpstreamDecodeTest, AFieldUnknownUpstreamFailsTheRead) {
  collector_pb::ExportProfilesServiceRequest request;
  request.mutable_dictionary()->add_string_table("");
  request.GetReflection()->MutableUnknownFields(&request)->AddVarint(99, 1);
  const std::string serialized = request.SerializeAsString();
  const absl::StatusOr<std::string> text = testing::DecodeWithUpstreamProtos(serialized);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("99: 1"));
  const auto read = testing::ReadWithUpstreamProtos(serialized);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("does not fit"));
  // Bytes that are no message at all.
  const auto garbage = testing::DecodeWithUpstreamProtos("\xff\xff\xff");
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(std::string(garbage.status().message()), HasSubstr("protoc --decode"));
}

}  // namespace
}  // namespace ember
