// Frames as the agent's symbol cache would hold them, for the tests of the outputs (pprof, OTLP).
// `work_copy` has the same content as `work` but is a different object, as when two cache
// generations name the same code; `syscall` and `libc_write` suit stacks of several processes.
#pragma once

#include "common/profile.h"

namespace ember::testing {

struct TestFrames {
  Frame syscall{FrameKind::kKernel, "do_syscall_64",     "", 0,
                0xffffffff81000100, "[kernel.kallsyms]", ""};
  Frame ext4{FrameKind::kKernel, "ext4_file_write_iter", "", 0, 0xffffffffc0100200, "[ext4]", ""};
  Frame app_main{FrameKind::kNative, "main", "src/app.cc", 10, 0x1100, "/usr/bin/app", "abcd01"};
  Frame work{FrameKind::kNative, "Work(int)", "src/app.cc", 20, 0x1200, "/usr/bin/app", "abcd01"};
  Frame work_copy = work;
  Frame work_later{FrameKind::kNative, "Work(int)", "src/app.cc", 22, 0x1210,
                   "/usr/bin/app",     "abcd01"};
  Frame libc_write{FrameKind::kNative, "write", "", 0, 0xf5000, "/usr/lib/libc.so.6", "c0ffee"};
  Frame unnamed{FrameKind::kNative, "libfoo.so+0x1a2b", "", 0, 0x1a2b, "/opt/lib/libfoo.so", ""};
  Frame tool_main{FrameKind::kNative, "main", "", 0, 0x400, "/usr/bin/tool", ""};
};

}  // namespace ember::testing
