// Runs a program for a test: stdin as a pipe, stdout and stderr merged into one captured pipe,
// every wait bounded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ember::testing {

class Subprocess {
 public:
  explicit Subprocess(std::vector<std::string> argv);
  ~Subprocess();  // kills the process if it is still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool WriteStdin(const std::string& bytes);
  void CloseStdin();
  // Reads output until it contains `text` or the timeout passes; true if found.
  bool WaitForOutput(const std::string& text, std::chrono::milliseconds timeout);
  void Signal(int signal);
  // Waits for exit, reading output meanwhile; the exit code, or nullopt on timeout or a crash.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  const std::string& output() const { return output_; }
  // User and system CPU time of the process and of the children it waited for, once Wait has
  // seen it exit; nullopt before.
  std::optional<std::chrono::microseconds> cpu_time() const { return cpu_time_; }

 private:
  void ReadAvailable(int timeout_ms);

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int output_fd_ = -1;
  std::string output_;
  std::optional<int> exit_code_;
  std::optional<std::chrono::microseconds> cpu_time_;
};

// Runs argv to completion (bounded by timeout) and returns its exit code and merged output.
struct RunResult {
  std::optional<int> exit_code;
  std::string output;
};
RunResult RunProgram(std::vector<std::string> argv,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace ember::testing
