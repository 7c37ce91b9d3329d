// BuildExportRequest on hand-made intervals: the request passes the validator, every sampled stack
// resolves back through the dictionary to the same functions, each entry is stored once, and the
// resources follow the service.name and attribute rules.
#include "otlp/profiles_builder.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "otlp/request_validator.h"
#include "support/many_stacks.h"
#include "support/test_frames.h"
#include "support/test_samples.h"

namespace ember {
namespace {

using ::ember::testing::AddSamples;
using ::ember::testing::ManyStacks;

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;
namespace common_pb = opentelemetry::proto::common::v1;
namespace profiles_pb = opentelemetry::proto::profiles::v1development;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAreArray;

constexpr int64_t kPeriodNs = 10'000'000;  // 100 Hz
constexpr int64_t kStart = 1'700'000'000'000'000'000;
constexpr int64_t kDuration = 10'000'000'000;

// Samples of two processes over the shared test frames.
struct Fixture : ember::testing::TestFrames {
  IntervalProfile profile;
  ResourceContext context;

  Fixture() {
    profile.start_unix_ns = kStart;
    profile.duration_ns = kDuration;
    profile.period_ns = kPeriodNs;
    AddSamples(profile,
               {
                   {200, "tool", "tool", {&unnamed, &tool_main}, 4},
                   {100, "app", "worker", {&work, &app_main}, 5},
                   {100, "app", "main", {&ext4, &syscall, &libc_write, &work_copy, &app_main}, 3},
                   {101, "app", "worker", {&work_later, &app_main}, 1},
                   {200, "tool", "tool", {&syscall, &libc_write, &tool_main}, 2},
                   {200, "tool", "idle", {&tool_main}, 0},  // dropped: no samples
               });
    context.host_name = "node-1";
    context.scope_version = "1.2.3";
  }
};

const profiles_pb::Profile& OnlyProfile(const profiles_pb::ResourceProfiles& rp) {
  EXPECT_EQ(rp.scope_profiles_size(), 1);
  EXPECT_EQ(rp.scope_profiles(0).profiles_size(), 1);
  return rp.scope_profiles(0).profiles(0);
}

// Resource attributes as key -> value text ("int:N" for integers), failing on a repeated key.
std::map<std::string, std::string> Attributes(const profiles_pb::ResourceProfiles& rp) {
  std::map<std::string, std::string> out;
  for (const common_pb::KeyValue& kv : rp.resource().attributes()) {
    std::string value = kv.value().has_int_value() ? "int:" + std::to_string(kv.value().int_value())
                                                   : kv.value().string_value();
    EXPECT_TRUE(out.emplace(kv.key(), value).second) << "repeated key " << kv.key();
  }
  return out;
}

std::vector<std::string> Keys(const profiles_pb::ResourceProfiles& rp) {
  std::vector<std::string> keys;
  for (const common_pb::KeyValue& kv : rp.resource().attributes()) keys.push_back(kv.key());
  return keys;
}

class Decoded {
 public:
  explicit Decoded(const collector_pb::ExportProfilesServiceRequest& r) : d_(r.dictionary()) {}

  const std::string& Str(int32_t index) const { return d_.string_table(index); }

  // Function names of a sample's stack, leaf first, one per Line.
  std::vector<std::string> Functions(const profiles_pb::Sample& s) const {
    std::vector<std::string> names;
    for (int32_t loc : d_.stack_table(s.stack_index()).location_indices()) {
      for (const profiles_pb::Line& line : d_.location_table(loc).lines()) {
        names.push_back(Str(d_.function_table(line.function_index()).name_strindex()));
      }
    }
    return names;
  }

  // The string value of attribute `key` among `indices`, "" when absent.
  std::string Attribute(const google::protobuf::RepeatedField<int32_t>& indices,
                        const std::string& key) const {
    for (int32_t i : indices) {
      const profiles_pb::KeyValueAndUnit& kv = d_.attribute_table(i);
      if (Str(kv.key_strindex()) == key) return kv.value().string_value();
    }
    return "";
  }

  const profiles_pb::ProfilesDictionary& d_;
};

TEST(BuildExportRequestTest, PassesTheValidator) {
  Fixture f;
  const auto request = BuildExportRequest(f.profile, f.context);
  EXPECT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
}

TEST(BuildExportRequestTest, OneResourceProfilesPerPidInAscendingOrder) {
  Fixture f;
  const auto request = BuildExportRequest(f.profile, f.context);
  std::vector<std::string> pids;
  for (const auto& rp : request.resource_profiles()) {
    pids.push_back(Attributes(rp)["process.pid"]);
    const auto& scope = rp.scope_profiles(0).scope();
    EXPECT_EQ(scope.name(), "ember");
    EXPECT_EQ(scope.version(), "1.2.3");
    OnlyProfile(rp);
  }
  EXPECT_THAT(pids, ElementsAre("int:100", "int:101", "int:200"));
}

TEST(BuildExportRequestTest, StacksResolveToTheSampledFunctionsLeafFirst) {
  Fixture f;
  const auto request = BuildExportRequest(f.profile, f.context);
  const Decoded d(request);
  using Row = std::tuple<std::string, std::string, std::vector<std::string>, int64_t>;
  std::vector<Row> got;
  for (const auto& rp : request.resource_profiles()) {
    for (const auto& s : OnlyProfile(rp).samples()) {
      ASSERT_EQ(s.values_size(), 1);
      EXPECT_THAT(s.timestamps_unix_nano(), IsEmpty());
      got.emplace_back(Attributes(rp)["process.pid"],
                       d.Attribute(s.attribute_indices(), "thread.name"), d.Functions(s),
                       s.values(0));
    }
  }
  EXPECT_THAT(
      got, ElementsAre(Row{"int:100", "worker", {"Work(int)", "main"}, 5},
                       Row{"int:100",
                           "main",
                           {"ext4_file_write_iter", "do_syscall_64", "write", "Work(int)", "main"},
                           3},
                       Row{"int:101", "worker", {"Work(int)", "main"}, 1},
                       Row{"int:200", "tool", {"libfoo.so+0x1a2b", "main"}, 4},
                       Row{"int:200", "tool", {"do_syscall_64", "write", "main"}, 2}));
}

TEST(BuildExportRequestTest, EveryStringIsInTheStringTableOnce) {
  Fixture f;
  const auto request = BuildExportRequest(f.profile, f.context);
  const auto& strings = request.dictionary().string_table();
  EXPECT_EQ(strings[0], "");
  std::set<std::string> unique(strings.begin(), strings.end());
  EXPECT_EQ(unique.size(), static_cast<size_t>(strings.size()));
  // "main" is the name of two functions (app's, with a file, and tool's, without): one string.
  EXPECT_EQ(std::count(strings.begin(), strings.end(), "main"), 1);
  EXPECT_EQ(std::count(strings.begin(), strings.end(), "src/app.cc"), 1);
  for (const char* s :
       {"samples", "count", "cpu", "nanoseconds", "thread.name", "profile.frame.type",
        "process.executable.build_id.gnu", "/usr/bin/app", "[kernel.kallsyms]", "do_syscall_64"}) {
    EXPECT_EQ(std::count(strings.begin(), strings.end(), s), 1) << s;
  }
}

TEST(BuildExportRequestTest, NoStringIsLongerThanTheNameCap) {
  // Frames made elsewhere than the symbolizers, which cut names at the source; the bad bytes
  // triple in length as U+FFFD, so the cut must come after the repair.
  Frame leaf{.function = std::string(100000, 'f'),
             .source_file = std::string(5000, '\xFF'),
             .address = 0x10,
             .module = "/" + std::string(50000, 'm')};
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  AddSamples(profile, {{.pid = 7, .process = "app", .thread = "t", .frames = {&leaf}, .count = 1}});
  ResourceContext context;
  // Set as it is, not cut by AttachProcessMetadata.
  ProcessMetadata& metadata = profile.process_metadata[7];
  metadata.executable_path = "/" + std::string(9000, 'e');
  metadata.attributes.push_back({"k8s.pod.name", std::string(9000, 'p')});
  const auto request = BuildExportRequest(profile, context);
  for (const std::string& text : request.dictionary().string_table()) {
    EXPECT_LE(text.size(), kMaxNameBytes);
  }
  for (const auto& attribute : request.dictionary().attribute_table()) {
    EXPECT_LE(attribute.value().string_value().size(), kMaxNameBytes);
  }
  ASSERT_EQ(request.resource_profiles_size(), 1);
  for (const auto& attribute : request.resource_profiles(0).resource().attributes()) {
    EXPECT_LE(attribute.value().string_value().size(), kMaxNameBytes) << attribute.key();
  }
  const auto& strings = request.dictionary().string_table();
  EXPECT_EQ(std::count(strings.begin(), strings.end(),
                       std::string(kMaxNameBytes - 3, 'f') + "\xE2\x80\xA6"),
            1);
}

TEST(BuildExportRequestTest, FramesSharedAcrossProcessesAndCopiesAreStoredOnce) {
  Fixture f;
  const auto request = BuildExportRequest(f.profile, f.context);
  const auto& d = request.dictionary();
  // Distinct frames: syscall, ext4, app_main, work (= work_copy), work_later, libc_write, unnamed,
  // tool_main; plus the zero value at index 0.
  EXPECT_EQ(d.location_table_size(), 1 + 8);
  // Functions: (main, src/app.cc), (Work(int), src/app.cc), write, libfoo..., (main, ""),
  // do_syscall_64, ext4_file_write_iter.
  EXPECT_EQ(d.function_table_size(), 1 + 7);
  // Mappings: app, libc, libfoo, tool, [kernel.kallsyms], [ext4].
  EXPECT_EQ(d.mapping_table_size(), 1 + 6);
  // Stacks: five distinct sampled stacks.
  EXPECT_EQ(d.stack_table_size(), 1 + 5);
  // Attributes: frame types native and kernel, build ids abcd01 and c0ffee, threads worker, main,
  // tool.
  EXPECT_EQ(d.attribute_table_size(), 1 + 7);
  EXPECT_EQ(d.link_table_size(), 1);

  // Work(int) in pid 100 (via work and work_copy) and 101 (work_later) shares one Function;
  // write in pids 100 and 200 shares one Location.
  const auto& p100 = OnlyProfile(request.resource_profiles(0));
  const auto& p200 = OnlyProfile(request.resource_profiles(2));
  const auto leaf = [&](const profiles_pb::Sample& s, int k) {
    return d.stack_table(s.stack_index()).location_indices(k);
  };
  EXPECT_EQ(leaf(p100.samples(0), 0), leaf(p100.samples(1), 3));  // work, work_copy
  EXPECT_EQ(leaf(p100.samples(1), 2), leaf(p200.samples(1), 1));  // libc write
  EXPECT_EQ(leaf(p100.samples(1), 1), leaf(p200.samples(1), 0));  // do_syscall_64
}

TEST(BuildExportRequestTest, LocationsCarryFrameTypeAddressLineAndMapping) {
  Fixture f;
  const auto request = BuildExportRequest(f.profile, f.context);
  const auto& d = request.dictionary();
  const Decoded dec(request);
  std::map<std::string, std::vector<std::tuple<std::string, uint64_t, std::string, std::string,
                                               int64_t, std::string>>>
      by_function;
  for (int i = 1; i < d.location_table_size(); ++i) {
    const auto& loc = d.location_table(i);
    ASSERT_EQ(loc.lines_size(), 1);
    const auto& fn = d.function_table(loc.lines(0).function_index());
    const auto& m = d.mapping_table(loc.mapping_index());
    EXPECT_EQ(m.memory_start(), 0u);
    EXPECT_EQ(m.memory_limit(), 0u);
    EXPECT_EQ(m.file_offset(), 0u);
    by_function[dec.Str(fn.name_strindex())].emplace_back(
        dec.Attribute(loc.attribute_indices(), "profile.frame.type"), loc.address(),
        dec.Str(m.filename_strindex()),
        dec.Attribute(m.attribute_indices(), "process.executable.build_id.gnu"),
        loc.lines(0).line(), dec.Str(fn.filename_strindex()));
  }
  using T = std::tuple<std::string, uint64_t, std::string, std::string, int64_t, std::string>;
  EXPECT_THAT(by_function["do_syscall_64"],
              ElementsAre(T{"kernel", 0xffffffff81000100, "[kernel.kallsyms]", "", 0, ""}));
  EXPECT_THAT(by_function["ext4_file_write_iter"],
              ElementsAre(T{"kernel", 0xffffffffc0100200, "[ext4]", "", 0, ""}));
  EXPECT_THAT(by_function["write"],
              ElementsAre(T{"native", 0xf5000, "/usr/lib/libc.so.6", "c0ffee", 0, ""}));
  EXPECT_THAT(
      by_function["Work(int)"],
      UnorderedElementsAreArray({T{"native", 0x1200, "/usr/bin/app", "abcd01", 20, "src/app.cc"},
                                 T{"native", 0x1210, "/usr/bin/app", "abcd01", 22, "src/app.cc"}}));
  EXPECT_THAT(by_function["libfoo.so+0x1a2b"],
              ElementsAre(T{"native", 0x1a2b, "/opt/lib/libfoo.so", "", 0, ""}));
}

// Scale inlined into Middle inlined into DoubleInline, sampled there; Scale also sampled where it
// was not inlined, in another process.
TEST(BuildExportRequestTest, InlinedFunctionsAreLinesOfOneLocationInnermostFirst) {
  Frame inlined{
      FrameKind::kNative, "DoubleInline(int)", "src/app.cc", 21, 0x1580, "/usr/bin/app", "abcd01"};
  inlined.inlined = {{"Scale", "src/app.h", 12}, {"Middle(int)", "src/app.h", 18}};
  Frame scale{FrameKind::kNative, "Scale", "src/app.h", 13, 0x1600, "/usr/bin/app", "abcd01"};
  Frame app_main{FrameKind::kNative, "main", "src/app.cc", 10, 0x1100, "/usr/bin/app", "abcd01"};
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  AddSamples(profile, {
                          {100, "app", "app", {&inlined, &app_main}, 3},
                          {101, "app", "app", {&scale, &app_main}, 1},
                          {101, "app", "app", {&inlined, &app_main}, 2},
                      });
  const auto request = BuildExportRequest(profile, ResourceContext{});
  ASSERT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
  const auto& d = request.dictionary();
  const Decoded dec(request);

  const auto& sample = OnlyProfile(request.resource_profiles(0)).samples(0);
  ASSERT_EQ(d.stack_table(sample.stack_index()).location_indices_size(), 2)
      << "one location per frame, inlined or not";
  const auto& loc = d.location_table(d.stack_table(sample.stack_index()).location_indices(0));
  EXPECT_EQ(loc.address(), 0x1580u);
  using Row = std::tuple<std::string, std::string, int64_t>;
  std::vector<Row> lines;
  for (const auto& line : loc.lines()) {
    const auto& fn = d.function_table(line.function_index());
    lines.emplace_back(dec.Str(fn.name_strindex()), dec.Str(fn.filename_strindex()), line.line());
  }
  EXPECT_THAT(lines, ElementsAre(Row{"Scale", "src/app.h", 12}, Row{"Middle(int)", "src/app.h", 18},
                                 Row{"DoubleInline(int)", "src/app.cc", 21}));
  EXPECT_EQ(dec.Functions(sample),
            (std::vector<std::string>{"Scale", "Middle(int)", "DoubleInline(int)", "main"}));

  // Scale inlined and Scale out of line are one Function: Scale, Middle, DoubleInline, main. The
  // inlined frame sampled in both processes is one Location: inlined, scale, main.
  EXPECT_EQ(d.function_table_size(), 1 + 4);
  EXPECT_EQ(d.location_table_size(), 1 + 3);
  const auto& again = OnlyProfile(request.resource_profiles(1)).samples(1);
  EXPECT_EQ(d.stack_table(again.stack_index()).location_indices(0),
            d.stack_table(sample.stack_index()).location_indices(0));
}

TEST(BuildExportRequestTest, ProfileDescribesCpuSamples) {
  Fixture f;
  const auto request = BuildExportRequest(f.profile, f.context);
  const Decoded d(request);
  std::set<std::string> ids;
  for (const auto& rp : request.resource_profiles()) {
    const auto& p = OnlyProfile(rp);
    EXPECT_EQ(d.Str(p.sample_type().type_strindex()), "samples");
    EXPECT_EQ(d.Str(p.sample_type().unit_strindex()), "count");
    EXPECT_EQ(d.Str(p.period_type().type_strindex()), "cpu");
    EXPECT_EQ(d.Str(p.period_type().unit_strindex()), "nanoseconds");
    EXPECT_EQ(p.period(), kPeriodNs);
    EXPECT_EQ(p.time_unix_nano(), static_cast<uint64_t>(kStart));
    EXPECT_EQ(p.duration_nano(), static_cast<uint64_t>(kDuration));
    EXPECT_THAT(p.attribute_indices(), IsEmpty());
    ASSERT_EQ(p.profile_id().size(), 16u);
    EXPECT_NE(p.profile_id(), std::string(16, '\0'));
    ids.insert(p.profile_id());
    for (const auto& s : p.samples()) EXPECT_EQ(s.link_index(), 0);
  }
  EXPECT_EQ(ids.size(), 3u);  // one random id per profile
}

TEST(BuildExportRequestTest, ResourceAttributesOfAProcess) {
  Fixture f;
  f.profile.process_metadata[100] = {
      .executable_name = "app-server", .executable_path = "/usr/bin/app", .container_id = "3f2a9c"};
  const auto request = BuildExportRequest(f.profile, f.context);
  ASSERT_EQ(request.resource_profiles_size(), 3);
  const auto& app = request.resource_profiles(0);
  EXPECT_THAT(Keys(app),
              ElementsAre("service.name", "host.name", "process.pid", "process.executable.name",
                          "process.executable.path", "container.id"));
  EXPECT_THAT(
      Attributes(app),
      ElementsAre(Pair("container.id", "3f2a9c"), Pair("host.name", "node-1"),
                  Pair("process.executable.name", "app-server"),
                  Pair("process.executable.path", "/usr/bin/app"), Pair("process.pid", "int:100"),
                  Pair("service.name", "unknown_service:app-server")));
  // Nothing known of 200 beyond its samples: the sampled process name stands in for the
  // executable, and path and container are left out.
  EXPECT_THAT(
      Attributes(request.resource_profiles(2)),
      ElementsAre(Pair("host.name", "node-1"), Pair("process.executable.name", "tool"),
                  Pair("process.pid", "int:200"), Pair("service.name", "unknown_service:tool")));
  for (const auto& kv : app.resource().attributes()) {
    EXPECT_EQ(kv.key_strindex(), 0);
    EXPECT_NE(kv.value().value_case(), common_pb::AnyValue::kStringValueStrindex);
  }
}

TEST(BuildExportRequestTest, ServiceNameRules) {
  Fixture f;
  f.profile.samples.resize(2);  // pids 200 and 100
  f.profile.samples[0].process = "";
  f.profile.process_metadata[100] = {.executable_name = "app-server"};
  const auto service_names = [&] {
    std::vector<std::string> names;
    const auto request = BuildExportRequest(f.profile, f.context);
    for (const auto& rp : request.resource_profiles()) {
      names.push_back(Attributes(rp)["service.name"]);
    }
    return names;
  };
  // No name known at all for 200 (no executable, no process name).
  EXPECT_THAT(service_names(), ElementsAre("unknown_service:app-server", "unknown_service"));

  f.profile.process_metadata = {{100, {.service_name = "checkout"}}, {200, {}}};
  EXPECT_THAT(service_names(), ElementsAre("checkout", "unknown_service"));

  f.context.attributes = {{"service.name", "from-attributes"}};
  EXPECT_THAT(service_names(), ElementsAre("from-attributes", "from-attributes"));

  f.context.service_name = "from-otel-service-name";
  EXPECT_THAT(service_names(), ElementsAre("from-otel-service-name", "from-otel-service-name"));
}

TEST(BuildExportRequestTest, ExtraResourceAttributesAreAddedOnceEach) {
  Fixture f;
  f.profile.samples.resize(2);
  f.context.attributes = ParseResourceAttributes(
                             "deployment.environment=prod,host.name=given-host,process.pid=1,"
                             "container.id=fixed,team=perf%2Cinfra")
                             .attributes;
  const auto request = BuildExportRequest(f.profile, f.context);
  ASSERT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
  const auto& rp = request.resource_profiles(0);
  EXPECT_THAT(Keys(rp), ElementsAre("service.name", "host.name", "process.pid",
                                    "process.executable.name", "deployment.environment", "team"));
  const auto attrs = Attributes(rp);
  EXPECT_EQ(attrs.at("host.name"), "given-host");  // the user's host name wins
  EXPECT_EQ(attrs.at("process.pid"), "int:100");   // per-process facts win
  EXPECT_EQ(attrs.count("container.id"), 0u);
  EXPECT_EQ(attrs.at("deployment.environment"), "prod");
  EXPECT_EQ(attrs.at("team"), "perf,infra");
}

TEST(BuildExportRequestTest, PodAttributesFollowTheProcessAndWinOverTheAgentsOwn) {
  Fixture f;
  f.context.attributes = ParseResourceAttributes(
                             "k8s.cluster.name=prod-eu,k8s.pod.name=ember-agent-x7,"
                             "deployment.environment=prod")
                             .attributes;
  f.profile.process_metadata[100] = {
      .container_id = "3f2a9c",
      .service_name = "checkout",
      .attributes = {{"k8s.namespace.name", "shop"},
                     {"k8s.pod.name", "checkout-5d9c7b-x2x9z"},
                     {"k8s.deployment.name", "checkout"},
                     {"k8s.node.name", ""},            // empty: left out
                     {"container.id", "other"},        // the process's own field wins
                     {"k8s.namespace.name", "dup"}}};  // each key once
  const auto request = BuildExportRequest(f.profile, f.context);
  ASSERT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
  const auto& pod_process = request.resource_profiles(0);
  EXPECT_THAT(Keys(pod_process),
              ElementsAre("service.name", "host.name", "process.pid", "process.executable.name",
                          "container.id", "k8s.namespace.name", "k8s.pod.name",
                          "k8s.deployment.name", "k8s.cluster.name", "deployment.environment"));
  auto attributes = Attributes(pod_process);
  EXPECT_EQ(attributes["service.name"], "checkout");
  EXPECT_EQ(attributes["container.id"], "3f2a9c");
  EXPECT_EQ(attributes["k8s.namespace.name"], "shop");
  EXPECT_EQ(attributes["k8s.pod.name"], "checkout-5d9c7b-x2x9z");  // not the agent's own pod
  EXPECT_EQ(attributes["k8s.cluster.name"], "prod-eu");
  // A process outside any pod keeps the agent-wide attributes, the agent's pod name included:
  // the environment is the only source there is for it.
  EXPECT_EQ(Attributes(request.resource_profiles(2))["k8s.pod.name"], "ember-agent-x7");
}

// A sample's trace context: its span as a link (one link_table entry per distinct trace and span,
// shared across processes), its attributes beside thread.name; contexts never merge samples.
TEST(BuildExportRequestTest, TraceContextsBecomeLinksAndSampleAttributes) {
  Frame work{.function = "work", .address = 0x10, .module = "/app"};
  Frame other{.function = "other", .address = 0x20, .module = "/app"};
  const TraceLink checkout =
      testing::LinkOf("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
  const TraceLink search = testing::LinkOf("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
  TraceLink checkout_next = checkout;
  checkout_next.span_id[7] ^= 1;  // the same trace, the next span
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  const std::vector<std::pair<std::string, std::string>> route_checkout = {
      {"http.route", "/checkout"}, {"request.kind", "buy"}};
  AddSamples(profile, {{7, "app", "a", {&work}, 2, checkout, route_checkout},
                       {7, "app", "a", {&other}, 1, checkout, route_checkout},
                       {7, "app", "a", {&work}, 3, search, {{"http.route", "/search"}}},
                       {7, "app", "a", {&work}, 4, checkout_next, route_checkout},
                       {7, "app", "a", {&work}, 5},
                       {8, "db", "b", {&work}, 6, search, {{"http.route", "/search"}}},
                       // No trace, attributes only; an empty value and thread.name are not sample
                       // attributes of the context.
                       {8, "db", "b", {&work}, 7, {}, {{"http.route", "/idle"}, {"empty", ""}}},
                       {8, "db", "b", {&work}, 8, {}, {{"thread.name", "forged"}}}});
  const auto request = BuildExportRequest(profile, ResourceContext{});
  ASSERT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
  const Decoded d(request);
  const profiles_pb::ProfilesDictionary& dict = request.dictionary();
  // The zero link, then checkout, search and checkout's next span: once each.
  ASSERT_EQ(dict.link_table_size(), 4);
  EXPECT_EQ(dict.link_table(0).ByteSizeLong(), 0u);
  const auto link_of = [&](const profiles_pb::Sample& s) -> std::pair<std::string, std::string> {
    const profiles_pb::Link& link = dict.link_table(s.link_index());
    return {link.trace_id(), link.span_id()};
  };
  const auto bytes = [](const auto& id) {
    return std::string(reinterpret_cast<const char*>(id.data()), id.size());
  };
  const auto attributes_of = [&](const profiles_pb::Sample& s) {
    std::map<std::string, std::string> out;
    for (int32_t i : s.attribute_indices()) {
      const profiles_pb::KeyValueAndUnit& kv = dict.attribute_table(i);
      EXPECT_TRUE(out.emplace(d.Str(kv.key_strindex()), kv.value().string_value()).second)
          << "key " << d.Str(kv.key_strindex()) << " twice";
    }
    return out;
  };
  using Attrs = std::map<std::string, std::string>;
  const profiles_pb::Profile& app = OnlyProfile(request.resource_profiles(0));
  ASSERT_EQ(app.samples_size(), 5);
  EXPECT_EQ(link_of(app.samples(0)),
            std::make_pair(bytes(checkout.trace_id), bytes(checkout.span_id)));
  EXPECT_EQ(app.samples(0).link_index(), app.samples(1).link_index());
  EXPECT_EQ(link_of(app.samples(2)), std::make_pair(bytes(search.trace_id), bytes(search.span_id)));
  EXPECT_EQ(link_of(app.samples(3)),
            std::make_pair(bytes(checkout.trace_id), bytes(checkout_next.span_id)));
  EXPECT_EQ(app.samples(4).link_index(), 0);
  EXPECT_EQ(attributes_of(app.samples(0)),
            (Attrs{{"thread.name", "a"}, {"http.route", "/checkout"}, {"request.kind", "buy"}}));
  EXPECT_EQ(app.samples(0).attribute_indices(0), app.samples(3).attribute_indices(0));
  EXPECT_EQ(attributes_of(app.samples(2)),
            (Attrs{{"thread.name", "a"}, {"http.route", "/search"}}));
  EXPECT_EQ(attributes_of(app.samples(4)), (Attrs{{"thread.name", "a"}}));
  std::vector<int64_t> values;
  for (const profiles_pb::Sample& s : app.samples()) values.push_back(s.values(0));
  EXPECT_THAT(values, ElementsAre(2, 1, 3, 4, 5));

  const profiles_pb::Profile& db = OnlyProfile(request.resource_profiles(1));
  ASSERT_EQ(db.samples_size(), 3);
  EXPECT_EQ(db.samples(0).link_index(), app.samples(2).link_index());  // shared across processes
  EXPECT_EQ(db.samples(1).link_index(), 0);
  EXPECT_EQ(attributes_of(db.samples(1)), (Attrs{{"thread.name", "b"}, {"http.route", "/idle"}}));
  EXPECT_EQ(attributes_of(db.samples(2)), (Attrs{{"thread.name", "b"}}));
}

// What a process published about itself (its OpenTelemetry process context) joins its resource
// and wins over what the agent derives or is configured with, except what the agent measures.
TEST(BuildExportRequestTest, PublishedResourceAttributesWinExceptMeasuredOnes) {
  Fixture f;
  f.context.service_name = "from-otel-service-name";
  f.context.attributes = ParseResourceAttributes(
                             "deployment.environment.name=agent-env,k8s.cluster.name=prod-eu,"
                             "team=perf")
                             .attributes;
  f.profile.process_metadata[100] = {
      .executable_name = "app-server",
      .container_id = "3f2a9c",
      .service_name = "checkout-deployment",
      .attributes = {{"k8s.pod.name", "checkout-x2x9z"}, {"service.namespace", "derived"}},
      .published = {{"service.name", "checkout"},
                    {"service.namespace", "shop"},
                    {"service.version", "1.4.2"},
                    {"deployment.environment.name", "prod"},
                    {"service.instance.id", ""},  // empty: left out
                    {"container.id", "forged"},
                    {"k8s.pod.name", "forged"},
                    {"k8s.cluster.name", "forged"},
                    {"process.pid", "1"},
                    {"process.executable.name", "forged"},
                    {"host.name", "forged"},
                    {"service.version", "dup"}}};  // each key once: the first
  const auto request = BuildExportRequest(f.profile, f.context);
  ASSERT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
  const auto& rp = request.resource_profiles(0);
  EXPECT_THAT(Keys(rp),
              ElementsAre("service.name", "host.name", "process.pid", "process.executable.name",
                          "container.id", "k8s.pod.name", "service.namespace", "service.version",
                          "deployment.environment.name", "k8s.cluster.name", "team"));
  const auto attrs = Attributes(rp);
  EXPECT_EQ(attrs.at("service.name"), "checkout");
  EXPECT_EQ(attrs.at("service.namespace"), "shop");
  EXPECT_EQ(attrs.at("service.version"), "1.4.2");
  EXPECT_EQ(attrs.at("deployment.environment.name"), "prod");
  EXPECT_EQ(attrs.at("host.name"), "node-1");
  EXPECT_EQ(attrs.at("process.pid"), "int:100");
  EXPECT_EQ(attrs.at("process.executable.name"), "app-server");
  EXPECT_EQ(attrs.at("container.id"), "3f2a9c");
  EXPECT_EQ(attrs.at("k8s.pod.name"), "checkout-x2x9z");
  EXPECT_EQ(attrs.at("k8s.cluster.name"), "prod-eu");
  // Another process without a published context keeps the agent's values.
  const auto other = Attributes(request.resource_profiles(1));
  EXPECT_EQ(other.at("service.name"), "from-otel-service-name");
  EXPECT_EQ(other.at("deployment.environment.name"), "agent-env");
}

TEST(BuildExportRequestTest, EmptyIntervalGivesNoResourceProfilesAndZeroValueTables) {
  for (const bool all_zero_counts : {false, true}) {
    Fixture f;
    if (all_zero_counts) {
      for (auto& s : f.profile.samples) s.count = 0;
    } else {
      f.profile.samples.clear();
    }
    const auto request = BuildExportRequest(f.profile, f.context);
    EXPECT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
    EXPECT_EQ(request.resource_profiles_size(), 0);
    const auto& d = request.dictionary();
    EXPECT_THAT(d.string_table(), ElementsAre(""));
    EXPECT_EQ(d.mapping_table_size(), 1);
    EXPECT_EQ(d.location_table_size(), 1);
    EXPECT_EQ(d.function_table_size(), 1);
    EXPECT_EQ(d.link_table_size(), 1);
    EXPECT_EQ(d.attribute_table_size(), 1);
    EXPECT_EQ(d.stack_table_size(), 1);
  }
}

TEST(BuildExportRequestTest, OddInputsStillGiveAValidRequest) {
  Frame nameless{FrameKind::kNative, "", "", 0, 0x10, "", ""};  // all-zero Function and Mapping
  Frame bad_utf8{FrameKind::kNative, "f\xFF", "", 0, 0x20, "/bin/\xC3", ""};
  Frame repaired{FrameKind::kNative, "f\xEF\xBF\xBD", "", 0, 0x20, "/bin/\xEF\xBF\xBD", ""};
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  AddSamples(profile,
             {
                 {1, "p", "", {}, 2},                         // no frames, no thread name
                 {1, "p", "t\xFE", {nullptr, &nameless}, 1},  // null frame skipped
                 {1, "p", "t", {&bad_utf8}, 1},
                 {1, "p", "t", {&repaired}, 1},     // same text once repaired: same location
                 {1, "p", "t\xEF\xBF\xBD", {}, 1},  // same thread name as "t\xFE" once repaired
             });
  const auto request = BuildExportRequest(profile, ResourceContext{});
  ASSERT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
  const auto& d = request.dictionary();
  const auto& samples = OnlyProfile(request.resource_profiles(0)).samples();
  ASSERT_EQ(samples.size(), 5);
  EXPECT_EQ(samples[0].stack_index(), 0);
  EXPECT_THAT(samples[0].attribute_indices(), IsEmpty());
  const auto& nameless_loc =
      d.location_table(d.stack_table(samples[1].stack_index()).location_indices(0));
  EXPECT_EQ(d.stack_table(samples[1].stack_index()).location_indices_size(), 1);
  EXPECT_EQ(nameless_loc.mapping_index(), 0);
  EXPECT_EQ(nameless_loc.lines(0).function_index(), 0);
  EXPECT_EQ(Decoded(request).Attribute(samples[1].attribute_indices(), "thread.name"),
            "t\xEF\xBF\xBD");
  EXPECT_EQ(samples[2].stack_index(), samples[3].stack_index());
  EXPECT_EQ(samples[1].attribute_indices(0), samples[4].attribute_indices(0));
  std::string wire;
  ASSERT_TRUE(request.SerializeToString(&wire));
  collector_pb::ExportProfilesServiceRequest parsed;
  EXPECT_TRUE(parsed.ParseFromString(wire));  // proto3 parsing rejects invalid UTF-8
}

TEST(BuildExportRequestTest, WireRoundTrip) {
  Fixture f;
  const auto request = BuildExportRequest(f.profile, f.context);
  std::string wire;
  ASSERT_TRUE(request.SerializeToString(&wire));
  collector_pb::ExportProfilesServiceRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(request, parsed));
  EXPECT_TRUE(ValidateExportRequest(parsed).ok()) << ValidateExportRequest(parsed);
  EXPECT_EQ(Decoded(parsed).Functions(OnlyProfile(parsed.resource_profiles(0)).samples(1)),
            (std::vector<std::string>{"ext4_file_write_iter", "do_syscall_64", "write", "Work(int)",
                                      "main"}));
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

TEST(BuildExportRequestTest, JitFramesCarryTheirRuntimesFrameType) {
  const std::vector<std::pair<FrameKind, std::string>> kinds = {
      {FrameKind::kNative, "native"}, {FrameKind::kKernel, "kernel"},
      {FrameKind::kV8Js, "v8js"},     {FrameKind::kJvm, "jvm"},
      {FrameKind::kDotnet, "dotnet"}, {FrameKind::kCPython, "cpython"},
      {FrameKind::kJit, "jit"},       {FrameKind::kGo, "go"}};
  std::vector<Frame> frames;
  for (size_t i = 0; i < kinds.size(); ++i) {
    frames.push_back(Frame{kinds[i].first, "f" + kinds[i].second, "", 0, 0x7f0000000000 + i,
                           "/tmp/perf-7.map", ""});
  }
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  ::ember::testing::OwnedSample sample{7, "p", "t", {}, 1};
  for (const Frame& frame : frames) sample.frames.push_back(&frame);
  ::ember::testing::AddSamples(profile, {sample});
  const auto request = BuildExportRequest(profile, ResourceContext{});
  ASSERT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
  const auto& d = request.dictionary();
  const Decoded dec(request);
  std::map<std::string, std::string> type_of;
  for (int i = 1; i < d.location_table_size(); ++i) {
    const auto& loc = d.location_table(i);
    type_of[dec.Str(d.function_table(loc.lines(0).function_index()).name_strindex())] =
        dec.Attribute(loc.attribute_indices(), "profile.frame.type");
  }
  for (const auto& [kind, type] : kinds) EXPECT_EQ(type_of["f" + type], type);
}

// --- BuildExportRequests: an interval over the receiver's size limit, in parts ---

using SampleRow = std::tuple<std::string, std::string, std::vector<std::string>, int64_t>;

// Every sample of the requests as (pid, thread, functions, count), sorted: what a backend adds up.
std::vector<SampleRow> AllRows(
    const std::vector<collector_pb::ExportProfilesServiceRequest>& requests) {
  std::vector<SampleRow> rows;
  for (const auto& request : requests) {
    const Decoded d(request);
    for (const auto& rp : request.resource_profiles()) {
      for (const auto& s : OnlyProfile(rp).samples()) {
        rows.emplace_back(Attributes(rp)["process.pid"],
                          d.Attribute(s.attribute_indices(), "thread.name"), d.Functions(s),
                          s.values(0));
      }
    }
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

size_t SerializedSize(const collector_pb::ExportProfilesServiceRequest& request) {
  return request.SerializeAsString().size();
}

TEST(BuildExportRequestsTest, OneRequestWhenTheIntervalFits) {
  Fixture f;
  const auto whole = BuildExportRequest(f.profile, f.context);
  const auto requests = BuildExportRequests(f.profile, f.context, SerializedSize(whole));
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(AllRows(requests), AllRows({whole}));
  EXPECT_EQ(requests[0].resource_profiles_size(), 3);
}

// The requests of `many` at a third of its whole request's size (*whole), each checked to fit and
// to stand alone (its dictionary holds what its samples use).
std::vector<collector_pb::ExportProfilesServiceRequest> PartsUnderAThird(
    const ManyStacks& many, collector_pb::ExportProfilesServiceRequest* whole) {
  const ResourceContext context;
  *whole = BuildExportRequest(many.profile, context);
  const size_t limit = SerializedSize(*whole) / 3;
  auto requests = BuildExportRequests(many.profile, context, limit);
  EXPECT_GE(requests.size(), 3u);
  for (const auto& request : requests) {
    EXPECT_LE(SerializedSize(request), limit);
    EXPECT_TRUE(ValidateExportRequest(request).ok()) << ValidateExportRequest(request);
  }
  return requests;
}

TEST(BuildExportRequestsTest, ProcessesAreSpreadOverRequestsUnderTheLimit) {
  // 63 samples: halves at sample 31 would cut the fourth process; the cuts fall between processes.
  const ManyStacks many(7, 9);
  collector_pb::ExportProfilesServiceRequest whole;
  const auto requests = PartsUnderAThird(many, &whole);
  std::map<std::string, int> requests_of_pid;
  for (const auto& request : requests) {
    for (const auto& rp : request.resource_profiles()) {
      ++requests_of_pid[Attributes(rp)["process.pid"]];
    }
  }
  // A process that fits is never cut: each is in one request.
  EXPECT_EQ(requests_of_pid.size(), 7u);
  for (const auto& [pid, count] : requests_of_pid) EXPECT_EQ(count, 1) << pid;
  EXPECT_EQ(AllRows(requests), AllRows({whole}));
}

TEST(BuildExportRequestsTest, AProcessTooBigAloneIsSplitByItsSamples) {
  const ManyStacks many(1, 60);
  collector_pb::ExportProfilesServiceRequest whole;
  const auto requests = PartsUnderAThird(many, &whole);
  for (const auto& request : requests) {
    ASSERT_EQ(request.resource_profiles_size(), 1);
    EXPECT_EQ(Attributes(request.resource_profiles(0))["process.pid"], "int:1000");
    // Every part is the same interval.
    const auto& profile = OnlyProfile(request.resource_profiles(0));
    EXPECT_EQ(profile.time_unix_nano(), static_cast<uint64_t>(kStart));
    EXPECT_EQ(profile.duration_nano(), static_cast<uint64_t>(kDuration));
  }
  EXPECT_EQ(AllRows(requests), AllRows({whole}));
}

TEST(BuildExportRequestsTest, ASampleOverTheLimitGoesAlone) {
  Fixture f;
  const auto requests = BuildExportRequests(f.profile, f.context, 1);
  ASSERT_EQ(requests.size(), 5u);  // the samples with a count above 0
  for (const auto& request : requests) {
    ASSERT_EQ(request.resource_profiles_size(), 1);
    EXPECT_EQ(OnlyProfile(request.resource_profiles(0)).samples_size(), 1);
  }
  EXPECT_EQ(AllRows(requests), AllRows({BuildExportRequest(f.profile, f.context)}));
}

TEST(BuildExportRequestsTest, NoRequestForAnIntervalWithoutSamples) {
  Fixture f;
  for (auto& s : f.profile.samples) s.count = 0;
  EXPECT_THAT(BuildExportRequests(f.profile, f.context, 1 << 20), IsEmpty());
}

}  // namespace
}  // namespace ember
