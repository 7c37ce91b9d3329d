// The BPF map entry (`python_procs`, bpf/sample_record.h) that lets the sampling program walk a
// CPython process's frames, made from the walker's configuration.
#pragma once

#include <optional>

#include "runtimes/cpython/frame_walker.h"

extern "C" {
#include "sample_record.h"
}

namespace ember::python {

// The entry for a process whose interpreter `config` describes; nullopt when an offset does not
// fit the entry (every verified layout fits, see docs/cpython.md).
std::optional<ember_python_proc> MakeBpfPythonProc(const WalkerConfig& config);

// The frame the BPF program recorded, as the user-space walker's RawFrame.
RawFrame RawFrameOf(const ember_python_frame& frame);

}  // namespace ember::python
