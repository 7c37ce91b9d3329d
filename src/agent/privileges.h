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

}  // namespace ember
