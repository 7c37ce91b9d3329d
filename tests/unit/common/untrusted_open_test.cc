// OpenUntrusted on a directory tree standing in for a container's root: its links stay inside
// it, what is not a regular file (a FIFO above all) is refused at once, and a file other than the
// mapped one is refused; and the .gnu_debuglink name rules.
#include "common/untrusted_open.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class UntrustedOpenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::path(::testing::TempDir()) / absl::StrCat("untrusted_open_", getpid());
    fs::remove_all(base_);
    root_ = base_ / "root";
    fs::create_directories(root_ / "lib");
    host_file_ = base_ / "host" / "secret.so";
    Write(host_file_, "host");
    // The same absolute path inside the root holds the container's own file.
    Write(root_ / host_file_.relative_path(), "inside");
    Write(root_ / "lib" / "libreal.so", "real");
    Write(root_ / "outside.so", "inside-top");
    // Nothing may hang for good: a blocking open ends the test by SIGALRM.
    alarm(20);
  }
  void TearDown() override {
    alarm(0);
    fs::remove_all(base_);
  }

  static void Write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }

  absl::StatusOr<std::string> ReadUnder(const std::string& path,
                                        std::optional<FileIdentity> id = {}) {
    absl::StatusOr<UntrustedFile> file = OpenUntrusted(FileLocation(root_, path, id));
    if (!file.ok()) return file.status();
    std::optional<std::string> text = ReadWholeFd(file->fd.get());
    if (!text.has_value()) return absl::DataLossError("unreadable");
    return *text;
  }

  fs::path base_, root_, host_file_;
};

TEST_F(UntrustedOpenTest, OpensARegularFileUnderTheRoot) {
  EXPECT_EQ(ReadUnder("/lib/libreal.so").value_or("error"), "real");
  EXPECT_EQ(ReadUnder("/lib/missing.so").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(UntrustedOpenTest, AnAbsoluteSymlinkResolvesInsideTheRoot) {
  fs::create_symlink(host_file_, root_ / "lib" / "libswapped.so");
  EXPECT_EQ(ReadUnder("/lib/libswapped.so").value_or("error"), "inside");
  // A link to a host path with no counterpart in the root finds nothing, not the host file.
  fs::remove(root_ / host_file_.relative_path());
  EXPECT_EQ(ReadUnder("/lib/libswapped.so").status().code(), absl::StatusCode::kNotFound);
  // So does a link in a directory on the way.
  fs::create_symlink(host_file_.parent_path(), root_ / "hostdir");
  EXPECT_EQ(ReadUnder("/hostdir/secret.so").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(UntrustedOpenTest, DotDotStaysInsideTheRoot) {
  std::string ups;
  for (int i = 0; i < 20; ++i) ups += "../";
  EXPECT_EQ(ReadUnder("/lib/" + ups + "outside.so").value_or("error"), "inside-top");
  fs::create_symlink(ups + "outside.so", root_ / "lib" / "libup.so");
  EXPECT_EQ(ReadUnder("/lib/libup.so").value_or("error"), "inside-top");
  // The host's copy next to the root is never reached.
  Write(base_ / "outside.so", "host");
  EXPECT_EQ(ReadUnder("/../outside.so").value_or("error"), "inside-top");
}

TEST_F(UntrustedOpenTest, AFifoIsRefusedAtOnce) {
  ASSERT_EQ(mkfifo((root_ / "lib" / "libpython3.11.so").c_str(), 0600), 0);
  uint64_t before = OpenRefusalCount(OpenRefusal::kNotRegular);
  absl::StatusOr<std::string> text = ReadUnder("/lib/libpython3.11.so");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(RefusalOf(text.status()), OpenRefusal::kNotRegular) << text.status();
  EXPECT_EQ(OpenRefusalCount(OpenRefusal::kNotRegular), before + 1);
  // Through a link, and in the agent's own namespace, the same.
  fs::create_symlink("/lib/libpython3.11.so", root_ / "lib" / "libfifo.so");
  EXPECT_EQ(RefusalOf(ReadUnder("/lib/libfifo.so").status()), OpenRefusal::kNotRegular);
  EXPECT_EQ(
      RefusalOf(
          OpenUntrusted(FileLocation((root_ / "lib" / "libpython3.11.so").string())).status()),
      OpenRefusal::kNotRegular);
}

TEST_F(UntrustedOpenTest, DirectoriesDevicesAndSocketsAreRefused) {
  EXPECT_EQ(RefusalOf(ReadUnder("/lib").status()), OpenRefusal::kNotRegular);
  EXPECT_EQ(RefusalOf(OpenUntrusted(FileLocation(std::string("/dev/null"))).status()),
            OpenRefusal::kNotRegular);
  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string sock_path = (root_ / "sock").string();
  ASSERT_LT(sock_path.size(), sizeof(addr.sun_path));
  memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
  ASSERT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_FALSE(ReadUnder("/sock").ok());  // ENXIO: a socket cannot be opened as a file
  close(sock);
}

TEST_F(UntrustedOpenTest, AFileOfAnotherIdentityIsRefused) {
  struct stat st;
  ASSERT_EQ(stat((root_ / "lib" / "libreal.so").c_str(), &st), 0);
  FileIdentity same{st.st_dev, st.st_ino};
  EXPECT_EQ(ReadUnder("/lib/libreal.so", same).value_or("error"), "real");
  uint64_t before = OpenRefusalCount(OpenRefusal::kIdentityMismatch);
  FileIdentity other{st.st_dev, st.st_ino + 1};
  EXPECT_EQ(RefusalOf(ReadUnder("/lib/libreal.so", other).status()),
            OpenRefusal::kIdentityMismatch);
  EXPECT_EQ(OpenRefusalCount(OpenRefusal::kIdentityMismatch), before + 1);
}

TEST_F(UntrustedOpenTest, MagicLinksAreNotFollowed) {
  EXPECT_EQ(RefusalOf(OpenUntrusted(FileLocation(std::string("/proc/self/exe"))).status()),
            OpenRefusal::kMagicLink);
  // Under a root, /proc/... is the root's own /proc: no such directory here.
  EXPECT_EQ(ReadUnder("/proc/self/exe").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(UntrustedOpenTest, TheMappedFileComesFirstAndThePathUnderTheRootAfter) {
  FileLocation location(root_, "/lib/libreal.so", std::nullopt,
                        (root_ / "outside.so").string());  // stands in for map_files
  absl::StatusOr<UntrustedFile> file = OpenUntrusted(location);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(ReadWholeFd(file->fd.get()), "inside-top");
  location.mapped_file = (root_ / "no-such-map-file").string();
  file = OpenUntrusted(location);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(ReadWholeFd(file->fd.get()), "real");
  ASSERT_EQ(mkfifo((root_ / "fifo").c_str(), 0600), 0);
  location.mapped_file = (root_ / "fifo").string();
  EXPECT_EQ(RefusalOf(OpenUntrusted(location).status()), OpenRefusal::kNotRegular);
}

TEST(DebugLinkNameTest, OnlyPlainFileNames) {
  EXPECT_TRUE(IsPlainDebugLinkName("libfoo.so.debug"));
  EXPECT_TRUE(IsPlainDebugLinkName("..debug"));
  EXPECT_FALSE(IsPlainDebugLinkName(""));
  EXPECT_FALSE(IsPlainDebugLinkName("."));
  EXPECT_FALSE(IsPlainDebugLinkName(".."));
  EXPECT_FALSE(IsPlainDebugLinkName("../../etc/shadow"));
  EXPECT_FALSE(IsPlainDebugLinkName("/etc/shadow"));
  EXPECT_FALSE(IsPlainDebugLinkName("sub/foo.debug"));
  EXPECT_FALSE(IsPlainDebugLinkName("foo\n.debug"));
  EXPECT_TRUE(IsPlainDebugLinkName(std::string(kMaxDebugLinkName, 'a')));
  EXPECT_FALSE(IsPlainDebugLinkName(std::string(kMaxDebugLinkName + 1, 'a')));
}

TEST(DebugLinkNameTest, CandidatesAreGdbsThree) {
  EXPECT_EQ(DebugLinkCandidates("/usr/lib/libfoo.so", "libfoo.debug", "/usr/lib/debug"),
            (std::vector<std::string>{"/usr/lib/libfoo.debug", "/usr/lib/.debug/libfoo.debug",
                                      "/usr/lib/debug/usr/lib/libfoo.debug"}));
  EXPECT_EQ(
      DebugLinkCandidates("/app", "app.debug", "/usr/lib/debug/"),
      (std::vector<std::string>{"/app.debug", "/.debug/app.debug", "/usr/lib/debug/app.debug"}));
  // The binary naming itself is left out.
  EXPECT_EQ(DebugLinkCandidates("/bin/x", "x", "/d").size(), 2u);
  EXPECT_TRUE(DebugLinkCandidates("/bin/x", "../x", "/d").empty());
  EXPECT_TRUE(DebugLinkCandidates("relative/x", "x.debug", "/d").empty());
}

}  // namespace
}  // namespace ember
