// HotSpot's detection, frame steps and splice, for the stack builder (runtime.h).
#include "runtimes/hotspot/hotspot_runtime.h"

#include <chrono>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "common/log_safe.h"
#include "spdlog/spdlog.h"

namespace ember::hotspot {
namespace {

// Lines about one process each: a workload starting many JVMs must not flood the log.
LogRateLimiter& ProcessLogLimiter() {
  static LogRateLimiter limiter(kLogLinesPerMinute, std::chrono::minutes(1));
  return limiter;
}

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// RuntimeFrame::kind: the stepped frame's kind plus one (0 is "no runtime frame"), and its flags.
uint32_t PackKind(const SteppedFrame& frame) {
  return (static_cast<uint32_t>(frame.flags) << 8) | (static_cast<uint32_t>(frame.kind) + 1);
}
JavaFrameKind KindOf(uint32_t packed) { return static_cast<JavaFrameKind>((packed & 0xff) - 1); }
bool IsLeaf(uint32_t packed) { return ((packed >> 8) & kFrameLeaf) != 0; }

// Reads of a JVM that failed before the failure is counted (unsupported, unreadable_process).
constexpr int kFailedTries = 3;

// The longest blob name read, NUL excluded.
constexpr size_t kMaxBlobNameBytes = 64;

// Adds an estimate of what `frame` holds to `bytes`; returns it.
size_t AddFrameBytes(const Frame& frame, size_t& bytes) {
  const size_t added = sizeof(std::unique_ptr<Frame>) + sizeof(Frame) + frame.function.capacity() +
                       frame.source_file.capacity() + frame.module.capacity();
  bytes += added;
  return added;
}

}  // namespace

// One JVM process: its libjvm, and once ready its layout, code cache, step and namer.
struct HotSpotRuntime::Jvm {
  uint32_t pid = 0;
  std::string name;  // the process's, for logs
  JvmProcess process;
  std::unique_ptr<MemoryReader> memory;
  JvmOutcome outcome = JvmOutcome::kNotReady;
  std::shared_ptr<const HotSpotLayout> layout;
  std::unique_ptr<CodeCache> code_cache;
  std::unique_ptr<FrameStepper> stepper;
  std::unique_ptr<MethodNamer> namer;
  int64_t next_retry_ns = 0;
  int failed_tries = 0;  // Prepare's reads that failed (kFailedTries)
  // Where the process maps libjvm.so: the same mapping again is the same JVM, whose outcome is
  // kept (a libjvm that could not be read is counted and logged once, not at every maps change).
  uint64_t libjvm_start = 0;
  FileIdentity libjvm_file;
  // Compiled frames stepped whose rbp was, or was not, their own frame pointer (as under
  // -XX:+PreserveFramePointer): whether the frame-pointer rule can stand in for the step.
  uint64_t frames_keeping_fp = 0;
  uint64_t frames_not_keeping_fp = 0;
  // Made ready on the sampling path: counted and logged at the next generation.
  bool announce = false;
  bool ready() const { return stepper != nullptr; }
  bool keeps_frame_pointers() const {
    return frames_keeping_fp > 0 && frames_not_keeping_fp * 16 <= frames_keeping_fp;
  }
};

size_t HotSpotRuntime::FrameKeyHash::operator()(const FrameKey& key) const {
  return absl::HashOf(key.pid, key.kind, key.check, key.object, key.position);
}

HotSpotRuntime::HotSpotRuntime(MetricsRegistry& metrics, MemoryFor memory_for, Clock clock,
                               std::string proc_root)
    : memory_for_(std::move(memory_for)),
      clock_(std::move(clock)),
      proc_root_(std::move(proc_root)) {
  if (memory_for_ == nullptr) {
    memory_for_ = [](uint32_t pid) {
      return std::make_unique<ProcessMemoryReader>(static_cast<pid_t>(pid));
    };
  }
  if (clock_ == nullptr) clock_ = SteadyNanos;
  // Registration fails only on a programming error (a bad or duplicate name).
  for (size_t i = 0; i < kJvmOutcomes; ++i) {
    process_metrics_.emplace_back(
        metrics
            .AddCounter("ember_hotspot_processes_total",
                        "HotSpot JVMs (processes mapping libjvm.so) by what reading their VM "
                        "structure tables and code cache gave: supported (their Java frames are "
                        "walked and named), not_ready (exited before its VM was initialised; "
                        "one not ready yet is read again and counted once decided), "
                        "unsupported, unreadable_libjvm, unreadable_process.",
                        {{"outcome", std::string(JvmOutcomeName(static_cast<JvmOutcome>(i)))}})
            .value());
  }
  for (int i = 0; i < kStepOutcomeCount; ++i) {
    step_metrics_.emplace_back(
        metrics
            .AddCounter("ember_hotspot_frames_stepped_total",
                        "Frames of HotSpot's interpreter and compiled code the unwinder met, by "
                        "how stepping to their caller ended (stepped, or why the walk stopped; "
                        "not_in_code_cache: code of a JVM outside its code cache, not stepped).",
                        {{"outcome", StepOutcomeName(static_cast<StepOutcome>(i))}})
            .value());
  }
  constexpr absl::string_view kNamed = "ember_hotspot_frames_named_total";
  constexpr absl::string_view kNamedHelp =
      "HotSpot frames named from the JVM's memory, once per cached frame, by result: named (Java "
      "methods), stub (stubs and adapters, by their code blob's name), stale (the method or "
      "compiled code was unloaded or replaced since the sample), read_failed, implausible, "
      "and, per frame, not_cached (the cache of named frames was full); a "
      "frame not named keeps the name the resolver gave it.";
  auto counter = [&](absl::string_view result) {
    return CounterMirror(
        metrics.AddCounter(kNamed, kNamedHelp, {{"result", std::string(result)}}).value());
  };
  named_metric_ = counter("named");
  stubs_metric_ = counter("stub");
  stale_metric_ = counter("stale");
  read_failed_metric_ = counter("read_failed");
  implausible_metric_ = counter("implausible");
  cache_bytes_metric_ =
      metrics
          .AddGauge("ember_hotspot_cache_bytes",
                    "Estimated bytes of the HotSpot frames named and of the methods, symbols and "
                    "compiled methods' scope tables read to name them, after each interval's "
                    "eviction.")
          .value();
  not_cached_metric_ = counter("not_cached");
}

HotSpotRuntime::~HotSpotRuntime() = default;

std::optional<JvmOutcome> HotSpotRuntime::OutcomeOf(uint32_t pid) const {
  auto found = jvms_.find(pid);
  if (found == jvms_.end()) return std::nullopt;
  if (found->second->ready()) return JvmOutcome::kSupported;  // perhaps not announced yet
  return found->second->outcome;
}

void HotSpotRuntime::ProcessMapsChanged(const Process& process) {
  const MemoryMapping* mapped = FindLibjvmMapping(process.mappings);
  auto found = jvms_.find(process.pid);
  if (mapped == nullptr) {  // not a JVM (any more)
    if (found != jvms_.end()) jvms_.erase(found);
    return;
  }
  if (found != jvms_.end() && found->second->libjvm_start == mapped->start &&
      found->second->libjvm_file == mapped->file) {
    return;  // the same libjvm where it was: more mappings, nothing new for the JVM
  }
  const std::string proc_dir = absl::StrCat(proc_root_, "/", process.pid);
  absl::StatusOr<std::optional<JvmProcess>> detected =
      DetectJvm(process.mappings, proc_dir + "/root", &files_, proc_dir);
  if (detected.ok() && !detected->has_value()) {
    if (found != jvms_.end()) jvms_.erase(found);
    return;
  }
  auto jvm = std::make_unique<Jvm>();
  jvm->pid = process.pid;
  jvm->name = process.name;
  jvm->libjvm_start = mapped->start;
  jvm->libjvm_file = mapped->file;
  if (!detected.ok()) {
    jvm->outcome = hotspot::OutcomeOf(detected.status());
    if (jvm->outcome == JvmOutcome::kNotReady) {  // no JVM read yet: detected again next time
      if (found != jvms_.end()) jvms_.erase(found);
      return;
    }
    ++stats_.processes[static_cast<size_t>(jvm->outcome)];
    LogLimited(ProcessLogLimiter(), spdlog::level::warn,
               "process {} ({}): its Java frames are not walked ({}): {}", process.pid,
               LogSafe(process.name), std::string(JvmOutcomeName(jvm->outcome)),
               LogSafe(detected.status().message()));
    jvms_[process.pid] = std::move(jvm);
    return;
  }
  jvm->process = **detected;
  jvm->memory = memory_for_(process.pid);
  Jvm& kept = *jvm;
  jvms_[process.pid] = std::move(jvm);
  Prepare(kept);
}

bool HotSpotRuntime::Prepare(Jvm& jvm) {
  if (jvm.ready()) return true;
  if (jvm.outcome != JvmOutcome::kNotReady) return false;  // decided: not to be retried
  jvm.next_retry_ns = clock_() + kRetryIntervalNs;
  JvmOutcome outcome = JvmOutcome::kSupported;
  std::string reason;
  if (jvm.layout == nullptr) {
    absl::StatusOr<std::shared_ptr<const HotSpotLayout>> layout =
        layouts_.Get(*jvm.memory, jvm.process);
    if (layout.ok()) {
      jvm.layout = *layout;
    } else {
      outcome = hotspot::OutcomeOf(layout.status());
      reason = std::string(layout.status().message());
    }
  }
  if (jvm.layout != nullptr) {
    const CodeCacheStatus status = ReadCodeCache(jvm);
    switch (status) {
      case CodeCacheStatus::kReady:
        break;
      case CodeCacheStatus::kNotReady:
        outcome = JvmOutcome::kNotReady;
        reason = "its code cache is not initialised yet";
        break;
      case CodeCacheStatus::kUnreadable:
        outcome = JvmOutcome::kUnreadableProcess;
        reason = "its code cache could not be read";
        break;
      case CodeCacheStatus::kBadLayout:
      case CodeCacheStatus::kInsane:
        outcome = JvmOutcome::kUnsupported;
        reason = absl::StrCat("its code cache is ", CodeCacheStatusName(status));
        break;
    }
  }
  // All of this is read from the process, which shows it half made while ld.so loads libjvm (its
  // .bss not mapped yet: strides read as garbage), while the VM initialises its code cache (heaps
  // added one by one, each filled in field by field) and while it exits: a failure is read again
  // a few times before it is decided. A JVM that exits meanwhile counts as not_ready, unlogged.
  if (outcome != JvmOutcome::kSupported && outcome != JvmOutcome::kNotReady &&
      ++jvm.failed_tries < kFailedTries) {
    outcome = JvmOutcome::kNotReady;
  }
  if (outcome == JvmOutcome::kNotReady) return false;  // counted once decided
  Decide(jvm, outcome, reason);
  return outcome == JvmOutcome::kSupported;
}

CodeCacheStatus HotSpotRuntime::ReadCodeCache(Jvm& jvm) {
  CodeCacheInfo info;
  const CodeCacheStatus status =
      ReadCodeCacheInfo(*jvm.layout, jvm.process.bias, *jvm.memory, &info);
  if (status == CodeCacheStatus::kReady) {
    jvm.code_cache = std::make_unique<CodeCache>(*jvm.layout, info);
    jvm.stepper = std::make_unique<FrameStepper>(*jvm.code_cache, *jvm.memory);
    jvm.namer = std::make_unique<MethodNamer>(*jvm.layout);
  }
  return status;
}

void HotSpotRuntime::Decide(Jvm& jvm, JvmOutcome outcome, const std::string& reason) {
  jvm.announce = false;
  jvm.outcome = outcome;
  ++stats_.processes[static_cast<size_t>(outcome)];
  if (outcome == JvmOutcome::kSupported) {
    LogLimited(ProcessLogLimiter(), spdlog::level::info,
               "process {} ({}) runs HotSpot {}.{}.{} ({}): walking its Java frames", jvm.pid,
               LogSafe(jvm.name), jvm.layout->major, jvm.layout->minor, jvm.layout->security,
               LogSafe(jvm.process.mapped_path));
    return;
  }
  LogLimited(ProcessLogLimiter(), spdlog::level::warn,
             "process {} ({}): its Java frames are not walked ({}): {}", jvm.pid, LogSafe(jvm.name),
             std::string(JvmOutcomeName(outcome)), LogSafe(reason));
}

void HotSpotRuntime::ProcessExited(uint32_t pid) {
  auto found = jvms_.find(pid);
  if (found == jvms_.end()) return;
  // A JVM gone before its VM was initialised (a short-lived one) is counted as not_ready, once.
  if (found->second->outcome == JvmOutcome::kNotReady) {
    ++stats_.processes[static_cast<size_t>(JvmOutcome::kNotReady)];
  }
  jvms_.erase(found);
}

bool HotSpotRuntime::StepCodeOutsideFiles(uint32_t pid, const FrameRegisters& frame,
                                          bool is_return_address, const StackMemory& stack,
                                          StepResult& result, RuntimeFrame& runtime_frame) {
  auto found = jvms_.find(pid);
  if (found == jvms_.end()) return false;
  Jvm& jvm = *found->second;
  if (!jvm.ready()) {
    // Per frame only the code cache's few statics are read again, once the layout is known; the
    // tables, the decision and its log line are left to NextGeneration and ProcessMapsChanged.
    if (jvm.outcome != JvmOutcome::kNotReady || jvm.layout == nullptr ||
        clock_() < jvm.next_retry_ns) {
      return false;
    }
    ++stats_.retries;
    jvm.next_retry_ns = clock_() + kRetryIntervalNs;
    if (ReadCodeCache(jvm) != CodeCacheStatus::kReady) return false;
    jvm.announce = true;
  }
  if (!jvm.stepper->InCodeCache(frame.value[kRegIp])) {  // another JIT's, or none
    ++stats_.steps[static_cast<size_t>(StepOutcome::kNotInCodeCache)];
    return false;
  }
  JavaStep step;
  jvm.stepper->Step(frame, /*leaf=*/!is_return_address, stack, step);
  ++stats_.steps[static_cast<size_t>(step.outcome)];
  // The JVM's memory is gone (the agent reads samples late, and a JVM may exit before its last
  // ones are read) or its code cache cannot be read: where its compiled code was seen keeping
  // rbp as the frame pointer, the frame-pointer rule still reaches the callers; elsewhere it
  // would skip frames, and the walk ends here.
  if (step.outcome == StepOutcome::kCodeUnreadable && jvm.keeps_frame_pointers()) return false;
  result.Reset();
  result.read_past_stack = step.read_past_stack;
  if (step.outcome == StepOutcome::kStepped && step.frame.kind == JavaFrameKind::kCompiled &&
      (step.frame.flags & kFrameInPrologueOrEpilogue) == 0 && frame.Has(kRegBp) &&
      step.caller.Has(kRegSp)) {
    ++(frame.value[kRegBp] + 16 == step.caller.value[kRegSp] ? jvm.frames_keeping_fp
                                                             : jvm.frames_not_keeping_fp);
  }
  // A frame that was identified is named even when the walk stops at it.
  if (step.frame.object != 0) {
    runtime_frame = {.object = step.frame.object,
                     .position = step.frame.position,
                     .kind = PackKind(step.frame),
                     .check = static_cast<uint32_t>(step.frame.compile_id)};
  }
  if (step.outcome == StepOutcome::kStepped) {
    result.caller = step.caller;
    result.end = StepEnd::kStepped;
  }
  return true;
}

void HotSpotRuntime::NameStub(Jvm& jvm, const RuntimeFrame& frame, NamedFrames& named) {
  const HotSpotLayout& layout = *jvm.layout;
  uint64_t name_address = 0;
  char name[kMaxBlobNameBytes + 1] = {};
  if (!layout.blob_name.present()) {
    ++stats_.implausible;
    return;
  }
  if (!jvm.memory->Read(frame.object + layout.blob_name.offset, &name_address,
                        sizeof(name_address)) ||
      name_address == 0) {
    ++stats_.read_failed;
    return;
  }
  // The name may end close to unreadable memory: read it in small pieces up to its NUL.
  size_t length = 0;
  while (length < kMaxBlobNameBytes) {
    const size_t piece = std::min<size_t>(16, kMaxBlobNameBytes - length);
    if (!jvm.memory->Read(name_address + length, name + length, piece)) break;
    const size_t end = std::string_view(name + length, piece).find('\0');
    if (end != std::string_view::npos) {
      length += end;
      break;
    }
    length += piece;
  }
  if (length == 0) {
    ++stats_.read_failed;
    return;
  }
  auto stub = std::make_unique<Frame>();
  stub->kind = FrameKind::kJvm;
  stub->function = absl::StrCat("[jvm] ", absl::string_view(name, length));
  stub->module = jvm.process.mapped_path;
  CapFrameNames(*stub);
  frame_bytes_ += AddFrameBytes(*stub, named.bytes);
  named.frames.push_back(std::move(stub));
  ++stats_.stubs_named;
}

const HotSpotRuntime::NamedFrames& HotSpotRuntime::Name(Jvm& jvm, const RuntimeFrame& frame) {
  // How the step got there (scanned return address, bcp from r13, ...) names nothing: only the
  // kind and whether the pc is a leaf's (looked up at or after, not exactly) do.
  const FrameKey key{.pid = jvm.pid,
                     .kind = frame.kind & (0xffu | (uint32_t{kFrameLeaf} << 8)),
                     .check = frame.check,
                     .object = frame.object,
                     .position = frame.position};
  auto found = frames_.find(key);
  if (found != frames_.end()) {
    found->second.generation = generation_;
    return found->second;
  }
  if (frames_.size() >= kMaxCachedFrames) {
    // Frames handed to the sample must outlive it, so one not kept is not named.
    static const NamedFrames kNotNamed;
    ++stats_.not_cached;
    return kNotNamed;
  }
  NamedFrames& named = frames_.try_emplace(key).first->second;
  named.generation = generation_;
  named.bytes = sizeof(FrameKey) + sizeof(NamedFrames) + 32;  // the node, roughly
  frame_bytes_ += named.bytes;
  NameStatus status = NameStatus::kOk;
  java_frames_.clear();
  switch (KindOf(frame.kind)) {
    case JavaFrameKind::kInterpreted: {
      JavaFrame java;
      status = jvm.namer->NameInterpreted(
          *jvm.memory, frame.object, frame.position, &java,
          frame.check != 0 ? std::optional<uint32_t>(frame.check) : std::nullopt);
      if (status == NameStatus::kOk) java_frames_.push_back(java);
      break;
    }
    case JavaFrameKind::kNativeWrapper:
      status = jvm.namer->NameNativeWrapper(*jvm.memory, frame.object,
                                            static_cast<int32_t>(frame.check), &java_frames_);
      break;
    case JavaFrameKind::kCompiled:
      status = jvm.namer->NameCompiled(*jvm.memory, frame.object, static_cast<int32_t>(frame.check),
                                       static_cast<int32_t>(frame.position),
                                       IsLeaf(frame.kind) ? PcMatch::kAtOrAfter : PcMatch::kExact,
                                       &java_frames_);
      break;
    case JavaFrameKind::kStub:
    case JavaFrameKind::kVtable:
    case JavaFrameKind::kCallStub:
      NameStub(jvm, frame, named);
      return named;
  }
  switch (status) {
    case NameStatus::kOk:
      ++stats_.named;
      break;
    case NameStatus::kStale:
      ++stats_.stale;
      break;
    case NameStatus::kReadFailed:
      ++stats_.read_failed;
      break;
    case NameStatus::kImplausible:
    case NameStatus::kUnsupported:
      ++stats_.implausible;
      break;
  }
  if (status != NameStatus::kOk) return named;  // keeps the resolver's frame
  for (const JavaFrame& java : java_frames_) {
    auto named_frame = std::make_unique<Frame>();
    FillFrame(java, named_frame.get());
    named_frame->module = jvm.process.mapped_path;
    CapFrameNames(*named_frame);
    frame_bytes_ += AddFrameBytes(*named_frame, named.bytes);
    named.frames.push_back(std::move(named_frame));
  }
  return named;
}

void HotSpotRuntime::Splice(const Process& process, const SampleView& sample, UserFrames frames) {
  if (frames.runtime_frames.empty() || frames.runtime_frames.size() != frames.pcs.size()) return;
  auto found = jvms_.find(process.pid);
  if (found == jvms_.end() || !found->second->ready()) return;
  Jvm& jvm = *found->second;
  std::vector<const Frame*>& stack = frames.stack;
  const size_t user_count = stack.size() - frames.begin;
  if (user_count != frames.runtime_frames.size()) return;
  bool any = false;
  for (const RuntimeFrame& frame : frames.runtime_frames) any |= frame.kind != 0;
  if (!any) return;
  user_frames_.assign(stack.begin() + static_cast<ptrdiff_t>(frames.begin), stack.end());
  stack.resize(frames.begin);
  for (size_t i = 0; i < user_count; ++i) {
    const RuntimeFrame& frame = frames.runtime_frames[i];
    if (frame.kind == 0) {
      stack.push_back(user_frames_[i]);
      continue;
    }
    const NamedFrames& named = Name(jvm, frame);
    if (named.frames.empty()) {
      stack.push_back(user_frames_[i]);
      continue;
    }
    for (const std::unique_ptr<Frame>& java : named.frames) stack.push_back(java.get());
  }
}

void HotSpotRuntime::NextGeneration() {
  ++generation_;
  for (auto it = frames_.begin(); it != frames_.end();) {
    if (it->second.generation + 2 <= generation_) {
      frame_bytes_ -= it->second.bytes;
      it = frames_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [pid, jvm] : jvms_) {
    if (jvm->announce) Decide(*jvm, JvmOutcome::kSupported, "");
    if (jvm->ready()) {
      jvm->namer->NextGeneration();
      jvm->code_cache->NextGeneration();
    } else if (jvm->outcome == JvmOutcome::kNotReady) {
      ++stats_.retries;
      Prepare(*jvm);
    }
  }
  // The named frames (counted as they are made and dropped), then the namers' caches.
  size_t bytes = frame_bytes_ + frames_.bucket_count() * sizeof(void*);
  for (const auto& [pid, jvm] : jvms_) {
    if (jvm->namer != nullptr) bytes += jvm->namer->HeldBytes();
  }
  held_bytes_ = bytes;
  cache_bytes_metric_->Set(static_cast<double>(bytes));
}

void HotSpotRuntime::SyncMetrics() {
  for (size_t i = 0; i < kJvmOutcomes; ++i) process_metrics_[i].Publish(stats_.processes[i]);
  for (int i = 0; i < kStepOutcomeCount; ++i) step_metrics_[i].Publish(stats_.steps[i]);
  named_metric_.Publish(stats_.named);
  stubs_metric_.Publish(stats_.stubs_named);
  stale_metric_.Publish(stats_.stale);
  read_failed_metric_.Publish(stats_.read_failed);
  implausible_metric_.Publish(stats_.implausible);
  not_cached_metric_.Publish(stats_.not_cached);
}

void HotSpotRuntime::LogSummary(const BpfStats&) const {
  uint64_t processes = 0;
  for (uint64_t count : stats_.processes) processes += count;
  if (processes == 0) return;
  uint64_t steps = 0;
  for (uint64_t count : stats_.steps) steps += count;
  spdlog::info(
      "hotspot: {} JVMs ({} supported, {} unsupported, {} unreadable); {} frames stepped of {}; "
      "{} named, {} stubs, {} stale, {} read failures, {} implausible",
      processes, stats_.processes[static_cast<size_t>(JvmOutcome::kSupported)],
      stats_.processes[static_cast<size_t>(JvmOutcome::kUnsupported)],
      stats_.processes[static_cast<size_t>(JvmOutcome::kUnreadableLibjvm)] +
          stats_.processes[static_cast<size_t>(JvmOutcome::kUnreadableProcess)],
      stats_.steps[static_cast<size_t>(StepOutcome::kStepped)], steps, stats_.named,
      stats_.stubs_named, stats_.stale, stats_.read_failed, stats_.implausible);
}

}  // namespace ember::hotspot
