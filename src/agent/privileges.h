// The capabilities ember-agent needs: checked before BPF is loaded, and cut down to what
// symbolization still needs once the sampler is attached. docs/capabilities.md is the reference.
#pragma once

#include <functional>

#include "absl/status/status.h"

namespace ember {

// Before loading BPF: FailedPrecondition with one line naming each missing required capability;
// logs a warning per missing optional one. Raises the permitted capabilities into the effective
// set.
absl::Status CheckCapabilities();

// After attaching: drops every other capability from the effective, permitted and inheritable
// sets, clears the ambient set, shrinks the bounding set when CAP_SETPCAP allows it, and sets
// no_new_privs; logs what was kept and dropped. `maps_accessible` is called with only the kept
// capabilities effective and says whether the agent's BPF maps can still be read. Capabilities
// belong to a thread, so this must run while the process has only one.
absl::Status DropCapabilities(const std::function<bool()>& maps_accessible);

// Runs `work` on a new thread that first empties its own effective, permitted and inheritable
// capability sets, and waits for it. A thread starts with its creator's sets, so every thread
// started inside `work` (and every thread those start) holds none either, and none can get one
// back. The agent creates and tears down its network I/O (the OTLP exporter, the pod watcher,
// the status endpoint, with the threads of gRPC, curl and libmicrohttpd) this way: only the
// sampling thread keeps what DropCapabilities kept. An error (the drop failed) means `work` did
// not run.
absl::Status RunWithoutCapabilities(const std::function<void()>& work);

}  // namespace ember
