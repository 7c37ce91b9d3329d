// LateDebugFiles between a real DebugFileFetcher (a transport standing in for the servers hands
// out the fixture program's debug file) and the frame cache: a cached frame of the stripped
// program is named once the file arrives, and counted; asked again at an export, a file already
// in the fetcher's cache names the frames of a module that still awaits it.
#include "stacks/late_debug_files.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "otlp/log_capture.h"
#include "process/process_table.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

// Serves every build id with the fixture's debug file, counting the requests.
class CopyingTransport : public DebuginfodTransport {
 public:
  CopyingTransport(std::filesystem::path debug_file, std::string staging, std::atomic<int>* calls)
      : debug_file_(std::move(debug_file)), staging_(std::move(staging)), calls_(calls) {}
  Download Fetch(const std::string& build_id, const std::atomic<bool>&) override {
    ++*calls_;
    const std::string dir = staging_ + "/" + build_id;
    std::filesystem::create_directories(dir);
    Download download{.result = FetchResult::kOk, .path = dir + "/debuginfo"};
    std::filesystem::copy_file(debug_file_, download.path,
                               std::filesystem::copy_options::overwrite_existing);
    return download;
  }

 private:
  std::filesystem::path debug_file_;
  std::string staging_;
  std::atomic<int>* calls_;
};

class LateDebugFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string fixtures = EMBER_SYMBOLIZE_FIXTURE_DIR;
    const std::string binary = fixtures + "/buildid/ember_sym_fixture_nolink";
    const std::string dir = root_ + "/4243";
    std::filesystem::create_directories(dir + "/root/bin");
    std::filesystem::copy_file(binary, dir + "/root/bin/prog");
    struct stat st;
    ASSERT_EQ(stat((dir + "/root/bin/prog").c_str(), &st), 0);
    std::ofstream(dir + "/stat") << "4243 (prog) R 1 4243 4243 0 -1 4194304 100 0 0 0 50 3 0 0 "
                                    "20 0 1 0 987655 10000000 200\n";
    std::ofstream(dir + "/comm") << "prog\n";
    std::ofstream(dir + "/status") << "Name:\tprog\nPid:\t4243\nNSpid:\t4243\n";
    std::ofstream(dir + "/maps") << absl::StrFormat(
        "00400000-00500000 r-xp 00000000 %02x:%02x %u                  /bin/prog\n",
        major(st.st_dev), minor(st.st_dev), static_cast<unsigned>(st.st_ino));
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(fixtures + "/buildid_debug")) {
      if (entry.path().extension() == ".debug") debug_file_ = entry.path();
    }
    ASSERT_FALSE(debug_file_.empty());
    // The entry point's file offset: the program maps from offset 0 at 0x400000 here.
    const int fd = open(binary.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    elf_version(EV_CURRENT);
    Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
    GElf_Ehdr ehdr;
    ASSERT_NE(gelf_getehdr(elf, &ehdr), nullptr);
    size_t count = 0;
    elf_getphdrnum(elf, &count);
    for (size_t i = 0; i < count; ++i) {
      GElf_Phdr phdr;
      if (gelf_getphdr(elf, static_cast<int>(i), &phdr) != nullptr && phdr.p_type == PT_LOAD &&
          ehdr.e_entry >= phdr.p_vaddr && ehdr.e_entry < phdr.p_vaddr + phdr.p_filesz) {
        entry_offset_ = ehdr.e_entry - phdr.p_vaddr + phdr.p_offset;
      }
    }
    elf_end(elf);
    close(fd);
    ASSERT_NE(entry_offset_, 0u);

    DebugFileFetcherOptions options;
    options.cache_dir = root_ + "/cache";
    auto fetcher =
        DebugFileFetcher::Create(options, [this, staging = options.cache_dir + "/client"] {
          return std::make_unique<CopyingTransport>(debug_file_, staging, &calls_);
        });
    ASSERT_TRUE(fetcher.ok()) << fetcher.status();
    fetcher_ = std::move(fetcher).value();
  }

  uint64_t FramesNamed() {
    const std::string text = metrics_.Render();
    const std::string line = "\nember_debuginfod_frames_named_total ";
    const size_t at = text.find(line);
    EXPECT_NE(at, std::string::npos) << text;
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + line.size()));
  }

  // Waits (10 s at most) until the fetcher announces an arrival.
  bool Arrived() {
    for (int i = 0; i < 2000 && !fetcher_->HasArrived(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return fetcher_->HasArrived();
  }

  std::string Unnamed() const { return absl::StrFormat("prog+0x%x", entry_offset_); }

  ::ember::testing::TempDir temp_{"ember-late-debug-files"};
  const std::string& root_ = temp_.path();
  std::filesystem::path debug_file_;
  uint64_t entry_offset_ = 0;
  std::atomic<int> calls_{0};
  MetricsRegistry metrics_;
  std::unique_ptr<DebugFileFetcher> fetcher_;
};

TEST_F(LateDebugFilesTest, AFetchedDebugFileNamesTheCachedFrameAndIsCounted) {
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules(16, ElfModuleOptions{.debug_dir = root_ + "/no-debug-dir"});
  FrameResolver frames(&processes, &modules, nullptr);
  LateDebugFiles late(*fetcher_, modules, frames, metrics_);
  fetcher_->Start();

  Process* process = processes.Get(4243);
  ASSERT_NE(process, nullptr);
  // The fetcher is the modules' source now: symbolizing the stripped program asks it.
  const Frame* frame = frames.User(process, 0x400000 + entry_offset_, /*caller=*/false);
  ASSERT_NE(frame, nullptr);
  EXPECT_EQ(frame->function, Unnamed());
  ASSERT_EQ(modules.AwaitedBuildIds().size(), 1u);
  ASSERT_TRUE(Arrived()) << "the fetch never ended";
  EXPECT_EQ(calls_.load(), 1);
  EXPECT_EQ(FramesNamed(), 0u);

  late.Collect(/*ask_again=*/false);
  EXPECT_EQ(frame->function, "_start");
  EXPECT_EQ(FramesNamed(), 1u);
  EXPECT_TRUE(modules.AwaitedBuildIds().empty());
  EXPECT_FALSE(fetcher_->HasArrived());
  // Nothing more arrived: nothing more named.
  late.Collect(/*ask_again=*/true);
  EXPECT_EQ(FramesNamed(), 1u);
  EXPECT_EQ(calls_.load(), 1);

  // The run's summary: the one file fetched and the one frame it named.
  ::ember::testing::LogCapture capture;
  late.LogSummary();
  ASSERT_EQ(capture.lines().size(), 1u) << capture.text();
  EXPECT_EQ(capture.lines()[0].rfind("debuginfod: 1 debug file(s) fetched, 0 not found, 0 "
                                     "error(s), 0 timeout(s), 0 refused; 1 frame(s) named late; ",
                                     0),
            0u)
      << capture.text();
}

TEST_F(LateDebugFilesTest, AskedAgainAFileAlreadyInTheCacheNamesTheFrames) {
  ProcessTable processes(root_, std::chrono::milliseconds(0));
  ModuleCache modules(16, ElfModuleOptions{.debug_dir = root_ + "/no-debug-dir"});
  FrameResolver frames(&processes, &modules, nullptr);
  LateDebugFiles late(*fetcher_, modules, frames, metrics_);
  fetcher_->Start();

  Process* process = processes.Get(4243);
  ASSERT_NE(process, nullptr);
  const Frame* frame = frames.User(process, 0x400000 + entry_offset_, /*caller=*/false);
  ASSERT_NE(frame, nullptr);
  ASSERT_TRUE(Arrived()) << "the fetch never ended";
  // The announcement is taken by another (as a loop that missed it would): only asking again
  // finds the file, now in the fetcher's cache.
  ASSERT_EQ(fetcher_->TakeArrived().size(), 1u);
  late.Collect(/*ask_again=*/false);
  EXPECT_EQ(frame->function, Unnamed());
  EXPECT_EQ(FramesNamed(), 0u);
  ASSERT_EQ(modules.AwaitedBuildIds().size(), 1u);

  late.Collect(/*ask_again=*/true);
  EXPECT_EQ(frame->function, "_start");
  EXPECT_EQ(FramesNamed(), 1u);
  EXPECT_TRUE(modules.AwaitedBuildIds().empty());
  // From the cache: the servers were not asked again.
  EXPECT_EQ(calls_.load(), 1);
}

}  // namespace
}  // namespace ember
