// A live JVM for the HotSpot unit tests: one of this machine's JDKs running vm_sleeper.java (the
// source launcher compiles it), its mappings, and what DetectJvm makes of them.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mapping.h"
#include "process/proc_maps.h"
#include "runtimes/hotspot/jvm_detect.h"
#include "support/subprocess.h"

namespace ember::hotspot::live {

inline const char* const kJdk17 = "/usr/lib/jvm/java-17-openjdk-amd64";
inline const char* const kJdk25 = "/usr/lib/jvm/temurin-25-jdk-amd64";

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class LiveJvm {
 public:
  // Starts `jdk`/bin/java; ok() is false (with a test failure) when it is missing or never says
  // it is up.
  explicit LiveJvm(const std::string& jdk) {
    const std::string java = jdk + "/bin/java";
    if (!std::filesystem::exists(java)) {
      ADD_FAILURE() << java << " missing: this test needs the JDK at " << jdk;
      return;
    }
    process_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{java, "-Xmx64m", "-XX:TieredStopAtLevel=1",
                                 std::string(EMBER_HOTSPOT_TEST_DIR) + "/vm_sleeper.java"});
    if (!process_->WaitForOutput("sleeper ready", std::chrono::seconds(60))) {
      ADD_FAILURE() << java << " did not start: " << process_->output();
      process_.reset();
    }
  }
  bool ok() const { return process_ != nullptr; }
  pid_t pid() const { return process_->pid(); }
  std::string root() const { return absl::StrCat("/proc/", pid(), "/root"); }

  std::vector<MemoryMapping> Mappings() const {
    absl::StatusOr<std::vector<MemoryMapping>> maps =
        ParseProcMaps(ReadText(absl::StrCat("/proc/", pid(), "/maps")));
    EXPECT_TRUE(maps.ok()) << maps.status();
    return maps.ok() ? *std::move(maps) : std::vector<MemoryMapping>{};
  }

  std::optional<JvmProcess> Detect() const {
    std::vector<MemoryMapping> maps = Mappings();
    absl::StatusOr<std::optional<JvmProcess>> jvm = DetectJvm(maps, root());
    EXPECT_TRUE(jvm.ok()) << jvm.status();
    if (!jvm.ok()) return std::nullopt;
    EXPECT_TRUE(jvm->has_value()) << "no libjvm.so in the maps of " << pid();
    return *jvm;
  }

 private:
  std::unique_ptr<testing::Subprocess> process_;
};

}  // namespace ember::hotspot::live
