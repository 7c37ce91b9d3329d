// What one wake-up costs a process on this host, by how much memory the process has resident
// (issue 7). The agent sleeps in epoll_wait between reads of its samples; the CPU time of the
// wait itself (going to sleep, and the context switch back in) is what a wake-up costs it. On a
// host with shadow paging that grows with the resident memory, and more so while other processes
// keep the CPUs busy, as a profiled host does.
//
//   build/wake_cost [--wait-ms 500] [--rounds 10] [--huge] [MB ...]   (default MB: 0 8 32 64)
//
// For each size it makes that much memory resident, then waits --rounds times for --wait-ms on an
// empty epoll set, touching every page after each wait; first on its own, then with one spinning
// process per online CPU. It prints the thread CPU time of one wait and of one touch round.
// --huge asks for transparent huge pages on the memory (madvise MADV_HUGEPAGE, 2 MiB aligned):
// whether the wake-up's cost follows the bytes resident or the pages mapped.
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Cost {
  int64_t wait_us = 0;   // CPU time of one epoll_wait that sleeps until its timeout
  int64_t touch_us = 0;  // CPU time to touch every resident page once after it
};

Cost Measure(char* memory, size_t bytes, int wait_ms, int rounds) {
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0) {
    std::perror("wake_cost: epoll_create1");
    std::exit(1);
  }
  int64_t waiting = 0, touching = 0;
  for (int round = 0; round < rounds; ++round) {
    epoll_event event;
    const int64_t before = ThreadCpuNs();
    epoll_wait(epoll, &event, 1, wait_ms);
    const int64_t woken = ThreadCpuNs();
    for (size_t at = 0; at < bytes; at += 4096) memory[at] += 1;
    touching += ThreadCpuNs() - woken;
    waiting += woken - before;
  }
  close(epoll);
  return {waiting / rounds / 1000, touching / rounds / 1000};
}

// One child per online CPU that spins until killed.
std::vector<pid_t> StartSpinners() {
  std::vector<pid_t> pids;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < cpus; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("wake_cost: fork");
      std::exit(1);
    }
    if (pid == 0) {
      volatile uint64_t x = 1;
      for (;;) x = x * 6364136223846793005ull + 1;
    }
    pids.push_back(pid);
  }
  return pids;
}

void StopSpinners(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) kill(pid, SIGKILL);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
}

int WholeNumber(const char* flag, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < 0 || value > 1'000'000) {
    std::fprintf(stderr, "wake_cost: %s wants a whole number, not '%s'\n", flag, text);
    std::exit(2);
  }
  return static_cast<int>(value);
}

}  // namespace

int main(int argc, char** argv) {
  int wait_ms = 500, rounds = 10;
  bool huge = false;
  std::vector<int> sizes_mb;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--wait-ms" || arg == "--rounds") && i + 1 < argc) {
      (arg == "--wait-ms" ? wait_ms : rounds) = WholeNumber(argv[i], argv[i + 1]);
      ++i;
    } else if (arg == "--huge") {
      huge = true;
    } else if (!arg.empty() && arg[0] != '-') {
      sizes_mb.push_back(WholeNumber("MB", argv[i]));
    } else {
      std::fprintf(stderr, "usage: wake_cost [--wait-ms 500] [--rounds 10] [--huge] [MB ...]\n");
      return 2;
    }
  }
  if (rounds == 0) {
    std::fprintf(stderr, "wake_cost: --rounds must be at least 1\n");
    return 2;
  }
  if (sizes_mb.empty()) sizes_mb = {0, 8, 32, 64};
  std::printf("| resident MB | pages | CPUs | one wait, µs | one touch of every page, µs |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int mb : sizes_mb) {
    // Not inherited by the spinners: shared copy-on-write, every touch would copy a page.
    // Mapped 2 MiB larger and aligned up, so that --huge can back every byte with huge pages.
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = size_t(mb) << 20;
    char* mapped = bytes == 0
                       ? nullptr
                       : static_cast<char*>(mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (mapped == MAP_FAILED) {
      std::perror("wake_cost: mmap");
      return 1;
    }
    char* memory = mapped == nullptr
                       ? nullptr
                       : reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(mapped) + kHuge - 1) &
                                                 ~(kHuge - 1));
    if (bytes > 0 && (madvise(memory, bytes, MADV_DONTFORK) != 0 ||
                      (huge && madvise(memory, bytes, MADV_HUGEPAGE) != 0))) {
      std::perror("wake_cost: madvise");
      return 1;
    }
    if (bytes > 0) std::memset(memory, 1, bytes);
    const char* pages = huge ? "2 MiB" : "4 KiB";
    const Cost idle = Measure(memory, bytes, wait_ms, rounds);
    std::printf("| %d | %s | idle | %lld | %lld |\n", mb, pages,
                static_cast<long long>(idle.wait_us), static_cast<long long>(idle.touch_us));
    const std::vector<pid_t> spinners = StartSpinners();
    const Cost busy = Measure(memory, bytes, wait_ms, rounds);
    StopSpinners(spinners);
    std::printf("| %d | %s | busy | %lld | %lld |\n", mb, pages,
                static_cast<long long>(busy.wait_us), static_cast<long long>(busy.touch_us));
    std::fflush(stdout);
    if (mapped != nullptr) munmap(mapped, bytes + kHuge);
  }
  return 0;
}
