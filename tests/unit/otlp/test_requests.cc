// MakeTestRequest through the real builder, so what the exporter sends is what the agent will.
#include "unit/otlp/test_requests.h"

#include "common/profile.h"
#include "otlp/profiles_builder.h"
#include "support/test_samples.h"

namespace ember::testing {
namespace {

constexpr int64_t kBaseTimeNs = 1'700'000'000'000'000'000;
constexpr int64_t kIntervalNs = 10'000'000'000;

}  // namespace

ExportRequest MakeTestRequest(int id, size_t padding) {
  Frame main_frame{FrameKind::kNative, "main", "app.cc", 3, 0x1100, "/usr/bin/app", "abcd01"};
  Frame work{FrameKind::kNative, "Work()", "app.cc", 9, 0x1200, "/usr/bin/app", "abcd01"};
  Frame syscall{FrameKind::kKernel, "do_syscall_64",     "", 0,
                0xffffffff81000100, "[kernel.kallsyms]", ""};
  IntervalProfile profile;
  profile.start_unix_ns = kBaseTimeNs + id * kIntervalNs;
  profile.duration_ns = kIntervalNs;
  profile.period_ns = 10'000'000;
  AddSamples(profile,
             {
                 {4242, "app", "worker" + std::string(padding, 'x'), {&work, &main_frame}, 3 + id},
                 {4242, "app", "main", {&syscall, &work, &main_frame}, 1},
             });
  ResourceContext context;
  context.host_name = "test-host";
  context.scope_version = "0.0.0-test";
  return BuildExportRequest(profile, context);
}

int IntervalId(const ExportRequest& request) {
  if (request.resource_profiles_size() == 0 ||
      request.resource_profiles(0).scope_profiles_size() == 0 ||
      request.resource_profiles(0).scope_profiles(0).profiles_size() == 0) {
    return -1;
  }
  uint64_t start = request.resource_profiles(0).scope_profiles(0).profiles(0).time_unix_nano();
  int64_t offset = static_cast<int64_t>(start) - kBaseTimeNs;
  if (offset < 0 || offset % kIntervalNs != 0) return -1;
  return static_cast<int>(offset / kIntervalNs);
}

int IntervalId(const std::string& serialized) {
  ExportRequest request;
  if (!request.ParseFromString(serialized)) return -1;
  return IntervalId(request);
}

std::string ResourceAttribute(const opentelemetry::proto::resource::v1::Resource& resource,
                              const std::string& key) {
  for (const auto& attribute : resource.attributes()) {
    if (attribute.key() == key) {
      return attribute.value().has_int_value() ? std::to_string(attribute.value().int_value())
                                               : attribute.value().string_value();
    }
  }
  return "";
}

}  // namespace ember::testing
