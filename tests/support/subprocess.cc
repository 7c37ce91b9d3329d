// fork/exec with pipes, for tests.
#include "support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace ember::testing {

Subprocess::Subprocess(std::vector<std::string> argv) {
  int in[2];
  int out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) std::abort();
  pid_ = fork();
  if (pid_ == 0) {
    // A test that crashes takes its programs with it (a busy loop left behind would skew every
    // later measurement on the machine).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  stdin_fd_ = in[1];
  output_fd_ = out[0];
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exit_code_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdin_fd_ >= 0) close(stdin_fd_);
  if (output_fd_ >= 0) close(output_fd_);
}

bool Subprocess::WriteStdin(const std::string& bytes) {
  return write(stdin_fd_, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
}

void Subprocess::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

void Subprocess::ReadAvailable(int timeout_ms) {
  if (output_fd_ < 0) return;
  pollfd p{output_fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return;
  char buffer[4096];
  ssize_t n = read(output_fd_, buffer, sizeof(buffer));
  if (n > 0) {
    output_.append(buffer, n);
  } else {
    close(output_fd_);
    output_fd_ = -1;
  }
}

bool Subprocess::WaitForOutput(const std::string& text, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (output_.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline || output_fd_ < 0) return false;
    ReadAvailable(50);
  }
  return true;
}

void Subprocess::Signal(int signal) {
  if (pid_ > 0 && !exit_code_) kill(pid_, signal);
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!exit_code_) {
    int status = 0;
    rusage usage{};
    pid_t done = wait4(pid_, &status, WNOHANG, &usage);
    if (done == pid_) {
      cpu_time_ = std::chrono::seconds(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                  std::chrono::microseconds(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
      while (output_fd_ >= 0) ReadAvailable(100);
      if (!WIFEXITED(status)) return std::nullopt;
      exit_code_ = WEXITSTATUS(status);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    ReadAvailable(50);
  }
  return exit_code_;
}

RunResult RunProgram(std::vector<std::string> argv, std::chrono::milliseconds timeout) {
  Subprocess process(std::move(argv));
  process.CloseStdin();
  RunResult result;
  result.exit_code = process.Wait(timeout);
  result.output = process.output();
  return result;
}

}  // namespace ember::testing
