// Runs runc as the tests' container runtime.
#include "runc_container.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

namespace fs = std::filesystem;
constexpr char kRunc[] = "/usr/sbin/runc";
constexpr char kBusybox[] = "/bin/busybox";  // Debian's busybox-static: no libraries to copy

std::string RandomHex(size_t length) {
  static absl::BitGen gen;
  std::string hex;
  for (size_t i = 0; i < length; ++i) hex += "0123456789abcdef"[absl::Uniform(gen, 0, 16)];
  return hex;
}

// Kills and deletes every container under kRuncTestRoot: only tests put containers there, and
// bpf tests run one at a time, so any found at start is a leftover of a test that crashed.
void DeleteLeftoverContainers() {
  RunResult list = RunProgram({kRunc, "--root", kRuncTestRoot, "list", "--quiet"});
  if (list.exit_code != 0) return;  // no root yet
  for (absl::string_view id : absl::StrSplit(list.output, '\n', absl::SkipWhitespace())) {
    RunProgram({kRunc, "--root", kRuncTestRoot, "kill", std::string(id), "KILL"});
    RunProgram({kRunc, "--root", kRuncTestRoot, "delete", "--force", std::string(id)});
  }
}

}  // namespace

std::string RandomContainerId() { return RandomHex(64); }

std::string RandomPodUid() {
  return absl::StrCat(RandomHex(8), "-", RandomHex(4), "-", RandomHex(4), "-", RandomHex(4), "-",
                      RandomHex(12));
}

std::string KubepodsCgroupPath(const std::string& pod_uid, const std::string& container_id) {
  return absl::StrCat("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod",
                      absl::StrReplaceAll(pod_uid, {{"-", "_"}}), ".slice/cri-containerd-",
                      container_id, ".scope");
}

std::unique_ptr<RuncContainer> RuncContainer::Start(const std::string& dir, const std::string& id,
                                                    const std::string& cgroups_path,
                                                    const std::vector<std::string>& args) {
  const std::string bundle = dir + "/bundle";
  std::error_code error;
  fs::create_directories(bundle + "/rootfs/bin", error);
  fs::copy_file(kBusybox, bundle + "/rootfs/bin/busybox", error);
  if (error) {
    ADD_FAILURE() << "cannot copy " << kBusybox << " into the bundle: " << error.message();
    return nullptr;
  }
  RunResult spec = RunProgram({kRunc, "spec", "--bundle", bundle});
  if (spec.exit_code != 0) {
    ADD_FAILURE() << "runc spec failed: " << spec.output;
    return nullptr;
  }
  nlohmann::json config;
  {
    std::ifstream in(bundle + "/config.json");
    config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  if (config.is_discarded() || !config.is_object()) {
    ADD_FAILURE() << "runc spec wrote no JSON object";
    return nullptr;
  }
  config["process"]["terminal"] = false;
  config["process"]["args"] = args;
  config["root"]["readonly"] = true;
  config["hostname"] = "ember-test";
  config["linux"]["cgroupsPath"] = cgroups_path;
  std::ofstream(bundle + "/config.json") << config.dump(1);

  static bool cleaned_up = false;
  if (!cleaned_up) DeleteLeftoverContainers();
  cleaned_up = true;
  std::unique_ptr<RuncContainer> container(new RuncContainer(id));
  // Detached: runc returns once the container runs. Its stdio goes to a file, not to a pipe
  // RunProgram would wait on for as long as the container lives.
  const std::string pid_file = dir + "/container.pid";
  const std::string log_file = dir + "/container.log";
  RunResult run = RunProgram(
      {"/bin/sh", "-c",
       absl::StrCat("exec ", kRunc, " --root '", kRuncTestRoot, "' run --detach --bundle '", bundle,
                    "' --pid-file '", pid_file, "' ", id, " </dev/null >'", log_file, "' 2>&1")},
      std::chrono::seconds(30));
  std::stringstream pid_text;
  pid_text << std::ifstream(pid_file).rdbuf();
  if (run.exit_code != 0 ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(pid_text.str()), &container->pid_) ||
      container->pid_ <= 0) {
    std::stringstream log;
    log << std::ifstream(log_file).rdbuf();
    ADD_FAILURE() << "runc run failed: " << run.output << log.str();
    container->pid_ = 0;
    return nullptr;  // the destructor deletes whatever runc left
  }
  return container;
}

RuncContainer::~RuncContainer() {
  RunProgram({kRunc, "--root", kRuncTestRoot, "kill", id_, "KILL"}, std::chrono::seconds(10));
  // delete --force waits for the processes to go and removes the cgroups runc made.
  RunResult deleted = RunProgram({kRunc, "--root", kRuncTestRoot, "delete", "--force", id_},
                                 std::chrono::seconds(30));
  EXPECT_EQ(deleted.exit_code, 0) << "runc delete: " << deleted.output;
}

}  // namespace ember::testing
