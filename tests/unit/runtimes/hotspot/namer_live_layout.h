// The namer's live test's own small reader of a running JVM's VM structure tables: just the
// entries the method namer reads, and the interpreter's code range, from libjvm's exported
// gHotSpotVM* symbols (nm -D) and the process's memory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "runtimes/hotspot/hotspot_layout.h"

namespace ember::hotspot::testing {

struct LiveJvm {
  HotSpotLayout layout;
  uint64_t interpreter_low = 0;  // [low, high): the template interpreter's code
  uint64_t interpreter_high = 0;
  // What the test reads besides the namer: InstanceKlass._methods (Array<Method*>*) and the
  // offset of that array's elements, Method._code (the nmethod callers enter).
  Field instance_klass_methods;
  uint32_t method_array_data = 0;
  Field method_code;
};

// Fills `jvm` from process `pid`; false with `*error` saying what was missing.
bool ReadLiveJvm(pid_t pid, LiveJvm* jvm, std::string* error);

}  // namespace ember::hotspot::testing
