// How StackBuilder ends a user stack, on synthetic records of a fixture /proc process: at the
// first frame nothing calls (Go's runtime.goexit, named from a Go fixture's own symbol table),
// whichever walk the record carries, and with "[truncated]" where the DWARF walk of a snapshot
// could not explain a frame.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "stacks/stack_builder.h"
#include "support/nm_symbols.h"

namespace ember {
namespace {

constexpr uint32_t kPid = 4242;
const std::string kGoProgram = std::string(EMBER_GO_FIXTURE_DIR) + "/gosym_go119";

// A ring-buffer record with its parts, decoded.
struct Record {
  std::vector<uint64_t> user;
  uint32_t flags = EMBER_SAMPLE_USER_REGS;
  std::array<uint64_t, EMBER_USER_REG_COUNT> regs{};
  std::vector<uint8_t> snapshot;

  SampleView Decode() {
    const size_t size = PythonFramesOffset(user.size(), snapshot.size());
    storage_.assign(size / 8, 0);
    auto* bytes = reinterpret_cast<uint8_t*>(storage_.data());
    ember_sample header{};
    header.version = EMBER_RECORD_VERSION;
    header.kind = EMBER_RECORD_SAMPLE;
    header.flags = flags;
    header.pid = kPid;
    header.tid = kPid;
    header.user_depth = static_cast<uint16_t>(user.size());
    header.user_snapshot_bytes = static_cast<uint32_t>(snapshot.size());
    std::memcpy(header.comm, "gosym", 6);
    std::memcpy(header.user_regs, regs.data(), sizeof(header.user_regs));
    std::memcpy(bytes, &header, sizeof(header));
    uint8_t* at = bytes + sizeof(header);
    for (uint64_t ip : user) at = static_cast<uint8_t*>(std::memcpy(at, &ip, 8)) + 8;
    if (!snapshot.empty()) std::memcpy(at, snapshot.data(), snapshot.size());
    SampleView view;
    EXPECT_EQ(DecodeSample(bytes, size, &view), DecodeResult::kOk);
    return view;
  }

 private:
  std::vector<uint64_t> storage_;
};

uint64_t SymbolAddress(const std::string& name) {
  for (const testing::NmSymbol& symbol : testing::NmSizedSymbols(kGoProgram, "Tt", false)) {
    if (symbol.name == name) return symbol.address;
  }
  ADD_FAILURE() << name << " not in " << kGoProgram;
  return 0;
}

// Process 4242 of a fixture /proc maps the Go program (not position-independent: its addresses
// are its ELF addresses) from under its root, where the table opens it.
class StackEndsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "ember-stack-ends-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    const std::string dir = absl::StrFormat("%s/%d", root_, kPid);
    std::filesystem::create_directories(dir + "/root");
    for (const char* name : {"stat", "comm", "exe"}) {
      std::filesystem::copy(std::string(EMBER_TEST_DATA_DIR) + "/proc/4242/" + name,
                            dir + "/" + name, std::filesystem::copy_options::copy_symlinks);
    }
    std::filesystem::copy_file(kGoProgram, dir + "/root/gosym");
    struct stat info;
    ASSERT_EQ(stat((dir + "/root/gosym").c_str(), &info), 0);
    std::ofstream(dir + "/maps") << absl::StrFormat(
        "00400000-00482000 r-xp 00000000 %02x:%02x %d /gosym\n"
        "7ffd6a5d8000-7ffd6a5f9000 rw-p 00000000 00:00 0 [stack]\n",
        major(info.st_dev), minor(info.st_dev), info.st_ino);
    processes_ = std::make_unique<ProcessTable>(root_, std::chrono::hours(1));
    frames_ = std::make_unique<FrameResolver>(processes_.get(), &modules_, nullptr);
    builder_ =
        std::make_unique<StackBuilder>(frames_.get(), processes_.get(), &unwinder_, metrics_);
    process_ = processes_->Get(kPid);
    ASSERT_NE(process_, nullptr);
    main_ = SymbolAddress("main.main");
    goexit_ = SymbolAddress("runtime.goexit.abi0");
    // The frame that makes a stack whole.
    const Frame* goexit = frames_->User(process_, goexit_ + 1, /*caller=*/true);
    ASSERT_TRUE(goexit->thread_start) << goexit->function;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // main.main, called by runtime.goexit, then a frame past the goroutine's start that a walk made
  // of the stack beyond it.
  std::vector<uint64_t> PastThreadStart() const { return {main_ + 16, goexit_ + 1, main_ + 32}; }

  std::string root_;
  ModuleCache modules_;
  DwarfUnwinder unwinder_;
  MetricsRegistry metrics_;
  std::unique_ptr<ProcessTable> processes_;
  std::unique_ptr<FrameResolver> frames_;
  std::unique_ptr<StackBuilder> builder_;
  Process* process_ = nullptr;
  uint64_t main_ = 0;
  uint64_t goexit_ = 0;
};

TEST_F(StackEndsTest, AFramePointerWalkEndsAtTheGoroutinesFirstFrame) {
  Record record;
  record.user = PastThreadStart();
  // At the depth limit: only the frame nothing calls tells the stack is whole.
  record.user.resize(EMBER_MAX_STACK_DEPTH, main_ + 32);
  const std::vector<const Frame*>& stack = builder_->Build(record.Decode(), process_);
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(stack[0]->function, "main.main");
  EXPECT_TRUE(stack[1]->thread_start);
  // No CFI walk to count.
  EXPECT_EQ(builder_->ends().complete + builder_->ends().truncated + builder_->ends().failed, 0u);
}

TEST_F(StackEndsTest, AShortBpfWalkThatReachedTheGoroutinesFirstFrameIsComplete) {
  Record record;
  record.user = PastThreadStart();
  record.flags |= EMBER_SAMPLE_UNWOUND_IN_BPF;  // stopped short, no snapshot
  const std::vector<const Frame*>& stack = builder_->Build(record.Decode(), process_);
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(stack[0]->function, "main.main");
  EXPECT_TRUE(stack[1]->thread_start);
  EXPECT_EQ(builder_->ends().complete, 1u);
  EXPECT_EQ(builder_->ends().failed, 0u);
}

TEST_F(StackEndsTest, ASnapshotWalkEndsAtTheGoroutinesFirstFrame) {
  // Stopped at main.main's first instruction, which runtime.goexit called; past goexit, what a
  // walk makes of the rest of a snapshot clamped short of the stack's end.
  Record record;
  constexpr uint64_t kSp = 0x7ffd6a5f0000;
  record.flags |= EMBER_SAMPLE_SNAPSHOT_CLAMPED;
  record.regs[EMBER_USER_REG_IP] = main_;
  record.regs[EMBER_USER_REG_SP] = kSp;
  const std::array<uint64_t, 2> words = {goexit_ + 1, main_ + 32};
  record.snapshot.resize(sizeof(words));
  std::memcpy(record.snapshot.data(), words.data(), sizeof(words));
  const std::vector<const Frame*>& stack = builder_->Build(record.Decode(), process_);
  std::vector<std::string> names;
  for (const Frame* f : stack) names.push_back(f->function);
  ASSERT_EQ(stack.size(), 2u) << ::testing::PrintToString(names);
  EXPECT_EQ(stack[0]->function, "main.main");
  EXPECT_TRUE(stack[1]->thread_start);
  EXPECT_EQ(builder_->ends().complete, 1u);
  EXPECT_EQ(builder_->ends().truncated + builder_->ends().failed, 0u);
}

TEST_F(StackEndsTest, ASnapshotWalkThatCannotExplainAFrameEndsTruncatedAndFailed) {
  // Stopped in code of no mapping, with a frame pointer below the stack pointer: neither CFI nor
  // the frame pointer gives a caller.
  Record record;
  constexpr uint64_t kSp = 0x7ffd6a5f0000;
  record.regs[EMBER_USER_REG_IP] = 0x1000;
  record.regs[EMBER_USER_REG_SP] = kSp;
  record.regs[EMBER_USER_REG_BP] = kSp - 64;
  record.snapshot.assign(256, 0);
  const std::vector<const Frame*>& stack = builder_->Build(record.Decode(), process_);
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(stack[0]->function, "[unknown]");
  EXPECT_EQ(stack[1]->function, "[truncated]");
  EXPECT_EQ(builder_->ends().failed, 1u);
  EXPECT_EQ(builder_->ends().complete + builder_->ends().truncated, 0u);
}

}  // namespace
}  // namespace ember
