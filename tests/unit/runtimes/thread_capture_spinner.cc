// A process for the thread capture tests: named threads spinning in known functions, each bumping
// a counter of its own, one with known values in its registers, one sleeping in libc, and with
// "vfork" one more thread held in vfork until stdin closes (a wait no ptrace interrupt ends).
// Prints where the counters are once all run.
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

extern "C" {

// main, spin-a, spin-b, sleeper, vforker, spin-regs
std::atomic<uint64_t> spin_counters[6];

__attribute__((noinline)) void SpinMain(std::atomic<uint64_t>* counter) {
  for (;;) counter->fetch_add(1, std::memory_order_relaxed);
}

__attribute__((noinline)) void SpinA(std::atomic<uint64_t>* counter) {
  for (;;) counter->fetch_add(2, std::memory_order_relaxed);
}

__attribute__((noinline)) void SpinB(std::atomic<uint64_t>* counter) {
  for (;;) counter->fetch_add(3, std::memory_order_relaxed);
}

// Holds 0x5eed0000 + its DWARF number in every general register but rbp and rsp, so a capture
// shows whether it put each register in its DWARF place.
void SpinRegisters(std::atomic<uint64_t>* counter);
asm(R"(
  .text
  .globl SpinRegisters
  .type SpinRegisters, @function
SpinRegisters:
  movabs $0x5eed0000, %rax
  movabs $0x5eed0001, %rdx
  movabs $0x5eed0002, %rcx
  movabs $0x5eed0003, %rbx
  movabs $0x5eed0004, %rsi
  movabs $0x5eed0005, %rdi
  movabs $0x5eed0008, %r8
  movabs $0x5eed0009, %r9
  movabs $0x5eed000a, %r10
  movabs $0x5eed000b, %r11
  movabs $0x5eed000c, %r12
  movabs $0x5eed000d, %r13
  movabs $0x5eed000e, %r14
  movabs $0x5eed000f, %r15
1:
  lock incq spin_counters+40(%rip)
  jmp 1b
  .size SpinRegisters, .-SpinRegisters
)");

}  // extern "C"

namespace {

void Sleeper(std::atomic<uint64_t>* counter) {
  for (;;) {
    usleep(2000);
    counter->fetch_add(1, std::memory_order_relaxed);
  }
}

// The parent thread waits in vfork until the child exits, which it does when stdin closes (or
// when this process dies).
void Vforker(std::atomic<uint64_t>* counter) {
  counter->store(1);
  if (vfork() == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char byte;
    while (read(0, &byte, 1) > 0) {
    }
    _exit(0);
  }
  for (;;) counter->fetch_add(1, std::memory_order_relaxed);
}

void Start(const char* name, void (*body)(std::atomic<uint64_t>*), std::atomic<uint64_t>* counter) {
  std::thread thread(body, counter);
  pthread_setname_np(thread.native_handle(), name);
  thread.detach();
}

}  // namespace

int main(int argc, char** argv) {
  const bool with_vfork = argc > 1 && std::strcmp(argv[1], "vfork") == 0;
  pthread_setname_np(pthread_self(), "spin-main");
  Start("spin-a", SpinA, &spin_counters[1]);
  Start("spin-b", SpinB, &spin_counters[2]);
  Start("sleeper", Sleeper, &spin_counters[3]);
  Start("spin-regs", SpinRegisters, &spin_counters[5]);
  if (with_vfork) Start("vforker", Vforker, &spin_counters[4]);
  for (int i = 1; i <= 5; ++i) {
    if (i == 4 && !with_vfork) continue;
    while (spin_counters[i].load() == 0) usleep(100);
  }
  std::printf("ready counters=%p SpinMain=%p\n", static_cast<void*>(spin_counters),
              reinterpret_cast<void*>(&SpinMain));
  std::fflush(stdout);
  SpinMain(&spin_counters[0]);
}
