// FindThreadContextTls on running helper programs, one per TLS model, compiler and linker: the
// address it resolves must be the one the helper's own thread prints for &otel_thread_ctx_v1.
#include "context/tls_location.h"

#include <sys/stat.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "process/process_table.h"
#include "runtimes/process_memory.h"
#include "support/subprocess.h"

namespace ember::context {
namespace {

using ::testing::HasSubstr;

const std::string kHelpers = EMBER_TLS_HELPERS;

struct Printed {
  uint64_t fs = 0;
  uint64_t address = 0;
};

// Waits for the helper's "fs=0x... addr=0x... end" line.
std::optional<Printed> ReadPrinted(testing::Subprocess& helper) {
  if (!helper.WaitForOutput(" end", std::chrono::seconds(20))) return std::nullopt;
  Printed printed;
  const std::string& out = helper.output();
  const size_t at = out.find("fs=");
  if (at == std::string::npos || std::sscanf(out.c_str() + at, "fs=0x%" SCNx64 " addr=0x%" SCNx64,
                                             &printed.fs, &printed.address) != 2) {
    return std::nullopt;
  }
  return printed;
}

// Where a thread with fs base `fs` keeps the variable, by `config` as the BPF program reads it.
std::optional<uint64_t> Resolve(const ember_context_proc& config, uint64_t fs,
                                MemoryReader& memory) {
  if (config.kind == EMBER_CONTEXT_TLS_TP_OFFSET) return fs + config.offset;
  if (config.kind != EMBER_CONTEXT_TLS_DTV) return std::nullopt;
  uint64_t dtv = 0;
  if (!memory.Read(fs + 8, &dtv, sizeof(dtv))) return std::nullopt;
  // glibc keeps the DTV's length one entry before it, musl in its first word.
  uint64_t length = 0;
  const uint64_t length_at = config.dtv_entry_shift == 3 ? dtv : dtv - 16;
  if (!memory.Read(length_at, &length, sizeof(length)) || config.module_id > length) {
    return std::nullopt;
  }
  uint64_t block = 0;
  if (!memory.Read(dtv + (config.module_id << config.dtv_entry_shift), &block, sizeof(block)) ||
      block == 0 || block == ~uint64_t{0}) {
    return std::nullopt;
  }
  return block + config.offset;
}

struct Case {
  const char* name;
  std::vector<std::string> argv;  // after the helpers' directory is prefixed to argv[0]
  TlsModel model;
  const char* module;  // the file name expected to define it
  const char* tunables = nullptr;
  bool musl = false;
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.name; }

class TlsLocationTest : public ::testing::TestWithParam<Case> {};

TEST_P(TlsLocationTest, ResolvesTheAddressTheThreadPrints) {
  const Case& c = GetParam();
  std::vector<std::string> argv;
  if (c.tunables != nullptr) {
    argv = {"/usr/bin/env", std::string("GLIBC_TUNABLES=") + c.tunables};
  }
  argv.push_back(kHelpers + "/" + c.argv[0]);
  argv.push_back("wait");
  argv.push_back("0");
  for (size_t i = 1; i < c.argv.size(); ++i) argv.push_back(kHelpers + "/" + c.argv[i]);
  testing::Subprocess helper(argv);
  std::optional<Printed> printed = ReadPrinted(helper);
  ASSERT_TRUE(printed.has_value()) << helper.output();

  ProcessTable table("/proc");
  Process* process = table.Get(helper.pid());
  ASSERT_NE(process, nullptr);
  ProcessMemoryReader memory(helper.pid());
  absl::StatusOr<TlsLocation> location = FindThreadContextTls(*process, memory);
  ASSERT_TRUE(location.ok()) << location.status();
  EXPECT_EQ(TlsModelName(location->model), std::string(TlsModelName(c.model)));
  EXPECT_EQ(std::filesystem::path(location->module_path).filename(), c.module);
  EXPECT_EQ(location->config.dtv_entry_shift, c.musl ? 3 : 4);
  std::optional<uint64_t> resolved = Resolve(location->config, printed->fs, memory);
  ASSERT_TRUE(resolved.has_value());
  EXPECT_EQ(*resolved, printed->address)
      << std::hex << "fs 0x" << printed->fs << " offset " << std::dec << location->config.offset
      << " module " << location->config.module_id;
  helper.CloseStdin();
  EXPECT_EQ(helper.Wait(std::chrono::seconds(10)), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Models, TlsLocationTest,
    ::testing::Values(
        Case{"ExecutableGccBfdPie", {"exe_gcc_bfd"}, TlsModel::kExecutable, "exe_gcc_bfd"},
        Case{"ExecutableGccNoPie", {"exe_gcc_nopie"}, TlsModel::kExecutable, "exe_gcc_nopie"},
        Case{"ExecutableClangLld", {"exe_clang_lld"}, TlsModel::kExecutable, "exe_clang_lld"},
        Case{"TlsDescStaticBfd",
             {"user_tlsdesc_gcc_bfd"},
             TlsModel::kTlsDescStatic,
             "libtlsdesc_gcc_bfd.so"},
        Case{"TlsDescStaticLld",
             {"user_tlsdesc_gcc_lld"},
             TlsModel::kTlsDescStatic,
             "libtlsdesc_gcc_lld.so"},
        // glibc places a dlopened library in static TLS while its surplus lasts; without any
        // surplus the descriptor is a dynamic one.
        Case{"TlsDescDynamicBfd",
             {"dlopen_user", "libtlsdesc_gcc_bfd.so"},
             TlsModel::kTlsDescDynamic,
             "libtlsdesc_gcc_bfd.so",
             "glibc.rtld.optional_static_tls=0"},
        Case{"TlsDescDynamicLld",
             {"dlopen_user", "libtlsdesc_gcc_lld.so"},
             TlsModel::kTlsDescDynamic,
             "libtlsdesc_gcc_lld.so",
             "glibc.rtld.optional_static_tls=0"},
        Case{"TlsDescDlopenedStatic",
             {"dlopen_user", "libtlsdesc_gcc_bfd.so"},
             TlsModel::kTlsDescStatic,
             "libtlsdesc_gcc_bfd.so"},
        Case{"GeneralDynamicBfd",
             {"user_gd_gcc_bfd"},
             TlsModel::kGeneralDynamic,
             "libgd_gcc_bfd.so"},
        Case{"GeneralDynamicClangLld",
             {"user_gd_clang_lld"},
             TlsModel::kGeneralDynamic,
             "libgd_clang_lld.so"},
        Case{"GeneralDynamicDlopened",
             {"dlopen_user", "libgd_gcc_bfd.so"},
             TlsModel::kGeneralDynamic,
             "libgd_gcc_bfd.so",
             "glibc.rtld.optional_static_tls=0"},
        Case{"InitialExecGotInLibrary",
             {"user_ie_gcc_bfd"},
             TlsModel::kInitialExec,
             "libie_gcc_bfd.so"},
        Case{"LocalDynamic", {"user_ld_gcc_bfd"}, TlsModel::kLocalDynamic, "libld_gcc_bfd.so"},
        // The library never reaches its variable; the executable does, by initial exec.
        Case{"InitialExecFromTheExecutable",
             {"user_exe_ie"},
             TlsModel::kInitialExec,
             "libdefine_only.so"},
        Case{"MuslExecutable", {"exe_musl"}, TlsModel::kExecutable, "exe_musl", nullptr, true},
        Case{"MuslGeneralDynamic",
             {"user_gd_musl"},
             TlsModel::kGeneralDynamic,
             "libgd_musl.so",
             nullptr,
             true},
        Case{"MuslTlsDescStatic",
             {"user_tlsdesc_musl"},
             TlsModel::kTlsDescStatic,
             "libtlsdesc_musl.so",
             nullptr,
             true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// glibc's and musl's placement of the executable's block, by hand.
TEST(ExecutableTlsBlockOffsetTest, RoundsUpToTheAlignmentOfTheSegmentsAddress) {
  EXPECT_EQ(ExecutableTlsBlockOffset(8, 8, 0x3de8), 8u);
  EXPECT_EQ(ExecutableTlsBlockOffset(9, 8, 0x3de8), 16u);
  EXPECT_EQ(ExecutableTlsBlockOffset(0x88, 64, 0x3dc0), 0xc0u);
  // A segment 8 bytes past a 64-byte boundary: its block starts 8 past one too.
  EXPECT_EQ(ExecutableTlsBlockOffset(0x10, 64, 0x3e08), 0x38u);
  EXPECT_EQ((0 - ExecutableTlsBlockOffset(0x10, 64, 0x3e08)) & 63, 8u);
  EXPECT_EQ(ExecutableTlsBlockOffset(8, 0, 0), 8u);
}

TEST(TlsFileTest, AProcessWithoutTheVariableIsNotFound) {
  testing::Subprocess helper({"/bin/sleep", "20"});
  ProcessTable table("/proc");
  Process* process = nullptr;
  // Until exec has mapped sleep, the child is still the test's image.
  for (int i = 0; i < 200; ++i) {
    process = table.Get(helper.pid());
    if (process != nullptr && process->name == "sleep") break;
    table.ReloadMaps(process);
    usleep(10'000);
  }
  ASSERT_NE(process, nullptr);
  ProcessMemoryReader memory(helper.pid());
  absl::StatusOr<TlsLocation> location = FindThreadContextTls(*process, memory);
  EXPECT_TRUE(absl::IsNotFound(location.status())) << location.status();
}

TEST(TlsFileTest, ASymbolThatIsNotThreadLocalIsRefused) {
  absl::StatusOr<TlsFileInfo> info = InspectTlsFile(kHelpers + "/libnot_tls.so");
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(info.status()));
  EXPECT_THAT(info.status().message(), HasSubstr("not a thread-local variable"));
}

TEST(TlsFileTest, AFileWithoutTheSymbolDefinesNothing) {
  absl::StatusOr<TlsFileInfo> info = InspectTlsFile(kHelpers + "/user_gd_gcc_bfd");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->defines);
  EXPECT_TRUE(info->relocations.empty());
}

TEST(TlsFileTest, ATruncatedFileIsAnError) {
  const std::string path = ::testing::TempDir() + "/truncated_tls.so";
  {
    std::ifstream in(kHelpers + "/libgd_gcc_bfd.so", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 2000u);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), 1500);
  }
  absl::StatusOr<TlsFileInfo> info = InspectTlsFile(path);
  EXPECT_FALSE(info.ok());
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(
          "\x7f"
          "ELF",
          4);
  EXPECT_FALSE(InspectTlsFile(path).ok());
  std::filesystem::remove(path);
}

TEST(TlsFileTest, TheDefiningFileStatesItsSymbolAndRelocations) {
  absl::StatusOr<TlsFileInfo> info = InspectTlsFile(kHelpers + "/libgd_gcc_bfd.so");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->defines);
  EXPECT_EQ(info->symbol_value, 40u);  // after helper_lib_padding[40]
  EXPECT_EQ(info->tls_memsz, 48u);
  EXPECT_FALSE(info->relocations.empty());
}

// A memory that reads as zeros everywhere: every GOT slot unrelocated.
class ZeroMemory : public MemoryReader {
 public:
  bool Read(uint64_t, void* out, size_t size) override {
    std::memset(out, 0, size);
    return true;
  }
};

// The process as a hand-made one mapping `library` like a loader would, at `base`.
Process MappedLibrary(const std::string& library, uint64_t base) {
  Process process;
  process.pid = getpid();
  process.proc_dir = "/proc/self";
  process.executable_path = "/nonexistent";
  absl::StatusOr<TlsFileInfo> info = InspectTlsFile(library);
  struct stat st;
  stat(library.c_str(), &st);
  for (const LoadSegment& segment : info->segments) {
    if (!segment.executable) continue;
    MemoryMapping mapping;
    mapping.start = base + (segment.vaddr & ~uint64_t{0xfff});
    mapping.end = mapping.start + 0x1000;
    mapping.offset = segment.offset & ~uint64_t{0xfff};
    mapping.readable = mapping.executable = true;
    mapping.file = {st.st_dev, st.st_ino};
    mapping.path = library;
    process.mappings.push_back(mapping);
  }
  return process;
}

TEST(TlsFileTest, ASlotNotRelocatedYetIsAnError) {
  for (const char* library : {"libtlsdesc_gcc_bfd.so", "libgd_gcc_bfd.so", "libie_gcc_bfd.so"}) {
    Process process = MappedLibrary(kHelpers + "/" + library, 0x7f0000000000);
    ASSERT_FALSE(process.mappings.empty());
    ZeroMemory memory;
    absl::StatusOr<TlsLocation> location = FindThreadContextTls(process, memory);
    EXPECT_TRUE(absl::IsUnavailable(location.status())) << library << ": " << location.status();
    EXPECT_THAT(location.status().message(), HasSubstr("not relocated")) << library;
  }
}

}  // namespace
}  // namespace ember::context
