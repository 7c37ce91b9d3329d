// A directory of a test's own for the files it writes, and writing them.
#pragma once

#include <string>
#include <string_view>

namespace ember::testing {

// A new directory under the system's temporary one, removed with all it holds when the object
// goes, so a failed assertion leaves nothing behind.
class TempDir {
 public:
  // Named `prefix`-XXXXXX; a test failure when it cannot be made, and path() is empty then.
  explicit TempDir(std::string_view prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `bytes` to the file at `path`, in place of what it held or, when `append`, after it; a
// test failure when it cannot.
void WriteFile(const std::string& path, std::string_view bytes, bool append = false);

}  // namespace ember::testing
