// The process metadata attached to an interval once reaches both writers alike: the pprof
// sample labels and the OTLP resource attributes of a process carry the same container, pod and
// service, cut to the same length.
#include <map>
#include <string>

#include "common/names.h"
#include "common/profile.h"
#include "gtest/gtest.h"
#include "otlp/profiles_builder.h"
#include "output/pprof_writer.h"
#include "support/test_samples.h"

namespace ember {
namespace {

using ::ember::testing::AddSamples;
using Labels = std::map<std::string, std::string>;

// What pprof says of the process of each sample beyond the sample itself, by pid; each sample
// of one process must say the same.
std::map<uint32_t, Labels> PprofProcessLabels(const perftools::profiles::Profile& p) {
  std::map<uint32_t, Labels> by_pid;
  for (const auto& sample : p.sample()) {
    uint32_t pid = 0;
    Labels labels;
    for (const auto& label : sample.label()) {
      const std::string& key = p.string_table(label.key());
      if (key == "pid") pid = static_cast<uint32_t>(label.num());
      if (key == "pid" || key == "process" || key == "thread") continue;
      labels[key] = p.string_table(label.str());
    }
    auto [it, inserted] = by_pid.emplace(pid, labels);
    if (!inserted) {
      EXPECT_EQ(it->second, labels) << "pid " << pid;
    }
  }
  return by_pid;
}

// The same keys of each OTLP resource: container.id, service.name and the k8s.* attributes.
std::map<uint32_t, Labels> OtlpProcessLabels(
    const opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest&
        request) {
  std::map<uint32_t, Labels> by_pid;
  for (const auto& rp : request.resource_profiles()) {
    uint32_t pid = 0;
    Labels labels;
    for (const auto& kv : rp.resource().attributes()) {
      if (kv.key() == "process.pid") pid = static_cast<uint32_t>(kv.value().int_value());
      if (kv.key() == "container.id" || kv.key() == "service.name" ||
          kv.key().rfind("k8s.", 0) == 0) {
        labels[kv.key()] = kv.value().string_value();
      }
    }
    by_pid[pid] = labels;
  }
  return by_pid;
}

TEST(ProcessMetadataWritersTest, BothWritersSayTheSameOfEachProcess) {
  Frame leaf{.function = "work", .address = 0x10, .module = "/app"};
  IntervalProfile profile;
  profile.period_ns = 10'000'000;
  AddSamples(profile,
             {{.pid = 7, .process = "app", .thread = "a", .frames = {&leaf}, .count = 2},
              {.pid = 8, .process = "db", .thread = "b", .frames = {&leaf}, .count = 1},
              {.pid = 7, .process = "app", .thread = "c", .frames = {&leaf}, .count = 3},
              {.pid = 9, .process = "host", .thread = "d", .frames = {&leaf}, .count = 1}});
  profile.AttachProcessMetadata(7, {.executable_name = "app-server",
                                    .executable_path = "/usr/bin/app-server",
                                    .container_id = "3f2a9c",
                                    .service_name = "checkout",
                                    .attributes = {{"k8s.namespace.name", "shop"},
                                                   {"k8s.pod.name", "checkout-5d9c7b-x2x9z"}}});
  // Names longer than the cap are cut once, where they are attached: both writers show the cut.
  const std::string long_pod(3 * kMaxNameBytes, 'p');
  const uint64_t labels_cut = NamesTruncated(NameKind::kLabel);
  const uint64_t output_cut = NamesTruncated(NameKind::kOutput);
  profile.AttachProcessMetadata(8, {.container_id = "77aa01",
                                    .service_name = "orders-db",
                                    .attributes = {{"k8s.pod.name", long_pod}}});
  // Nothing known of 9 beyond its samples.

  const std::map<uint32_t, Labels> pprof = PprofProcessLabels(BuildPprof(profile));
  ResourceContext context;
  context.host_name = "node-1";
  const std::map<uint32_t, Labels> otlp = OtlpProcessLabels(BuildExportRequest(profile, context));

  const std::string cut_pod = std::string(kMaxNameBytes - 3, 'p') + "\xE2\x80\xA6";
  const Labels want7 = {{"container.id", "3f2a9c"},
                        {"service.name", "checkout"},
                        {"k8s.namespace.name", "shop"},
                        {"k8s.pod.name", "checkout-5d9c7b-x2x9z"}};
  const Labels want8 = {
      {"container.id", "77aa01"}, {"service.name", "orders-db"}, {"k8s.pod.name", cut_pod}};
  ASSERT_EQ(pprof.size(), 3u);
  ASSERT_EQ(otlp.size(), 3u);
  EXPECT_EQ(pprof.at(7), want7);
  EXPECT_EQ(otlp.at(7), want7);
  EXPECT_EQ(pprof.at(8), want8);
  EXPECT_EQ(otlp.at(8), want8);
  // Without metadata, pprof has no label of it and OTLP none but the service name it makes up.
  EXPECT_EQ(pprof.at(9), Labels{});
  EXPECT_EQ(otlp.at(9), (Labels{{"service.name", "unknown_service:host"}}));
  EXPECT_EQ(NamesTruncated(NameKind::kLabel), labels_cut + 1);
  EXPECT_EQ(NamesTruncated(NameKind::kOutput), output_cut);
}

// What a process published about itself wins over the derived values alike in both writers, and
// neither lets it replace what the agent measures.
TEST(ProcessMetadataWritersTest, BothWritersLetPublishedAttributesWinAlike) {
  Frame leaf{.function = "work", .address = 0x10, .module = "/app"};
  IntervalProfile profile;
  profile.period_ns = 10'000'000;
  AddSamples(profile, {{.pid = 7, .process = "app", .thread = "a", .frames = {&leaf}, .count = 2}});
  profile.AttachProcessMetadata(7, {.container_id = "3f2a9c",
                                    .service_name = "checkout-deployment",
                                    .attributes = {{"k8s.pod.name", "checkout-x2x9z"}},
                                    .published = {{"service.name", "checkout"},
                                                  {"service.version", "1.4.2"},
                                                  {"container.id", "forged"},
                                                  {"k8s.pod.name", "forged"}}});
  const Labels pprof = PprofProcessLabels(BuildPprof(profile)).at(7);
  const auto request = BuildExportRequest(profile, ResourceContext{});
  ASSERT_EQ(request.resource_profiles_size(), 1);
  Labels otlp;
  for (const auto& kv : request.resource_profiles(0).resource().attributes()) {
    if (pprof.contains(kv.key())) otlp[kv.key()] = kv.value().string_value();
  }
  const Labels want = {{"container.id", "3f2a9c"},
                       {"k8s.pod.name", "checkout-x2x9z"},
                       {"service.name", "checkout"},
                       {"service.version", "1.4.2"}};
  EXPECT_EQ(pprof, want);
  EXPECT_EQ(otlp, want);
}

}  // namespace
}  // namespace ember
