// The per-process state of the OpenTelemetry process and thread contexts, and their metrics.
#include "context/trace_contexts.h"

#include <array>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ember::context {
namespace {

// ember_thread_context_records_total{result}: one of the first six per sample that has a
// thread-context status; the last two count records besides their result.
enum RecordMetric : uint8_t {
  kRecordOk,
  kRecordNoTrace,
  kRecordInvalid,
  kRecordNone,
  kRecordReadFailed,
  kRecordNoTlsBlock,
  kRecordAttributeTruncated,
  kRecordKeyOutOfRange,
  kRecordInvalidValue,
  kRecordMetrics
};
constexpr std::array<const char*, kRecordMetrics> kRecordNames = {"ok",
                                                                  "no_trace",
                                                                  "invalid",
                                                                  "none",
                                                                  "read_failed",
                                                                  "no_tls_block",
                                                                  "attribute_truncated",
                                                                  "key_out_of_range",
                                                                  "invalid_value"};

enum TlsMetric : uint8_t { kTlsOk, kTlsNotFound, kTlsFailed, kTlsBpfFailed, kTlsMetrics };
constexpr std::array<const char*, kTlsMetrics> kTlsNames = {"ok", "not_found", "failed",
                                                            "bpf_failed"};

enum NoticeMetric : uint8_t { kNoticeRead, kNoticeDeferred, kNoticeUnknown, kNoticeMetrics };
constexpr std::array<const char*, kNoticeMetrics> kNoticeNames = {"read", "deferred",
                                                                  "unknown_process"};

}  // namespace

struct TraceContexts::Metrics {
  explicit Metrics(MetricsRegistry& registry) {
    // Registration fails only on a programming error (a bad or duplicate name).
    for (size_t i = 0; i < kReadResults; ++i) {
      reads[i] =
          registry
              .AddCounter("ember_process_context_reads_total",
                          "Reads of sampled processes' OpenTelemetry process context (OTEL_CTX "
                          "mapping), by result: ok (read and decoded), unchanged (same timestamp), "
                          "no_mapping, bad_signature, bad_version, too_large (payload over 64 "
                          "KiB), torn (an update under way at every attempt), unreadable, "
                          "bad_payload (not a ProcessContext message).",
                          {{"result", std::string(ReadResultName(static_cast<ReadResult>(i)))}})
              .value();
    }
    skipped = registry
                  .AddCounter("ember_process_context_attributes_skipped_total",
                              "Resource attributes of process contexts left out: arrays, "
                              "key-value lists and bytes values, empty or repeated keys.")
                  .value();
    for (size_t i = 0; i < kRecordMetrics; ++i) {
      records[i] =
          registry
              .AddCounter("ember_thread_context_records_total",
                          "Samples of processes whose thread context is read, by what their "
                          "thread's record gave: ok (a span), no_trace (valid, no trace id), "
                          "invalid (valid byte not 1, or too short), none (no record: outside any "
                          "span), read_failed (TLS slot, pointer or record unreadable), "
                          "no_tls_block (the thread has no TLS block of that module yet); and, "
                          "besides those, records with an attribute entry past their end "
                          "(attribute_truncated: it and what follows are skipped) or with entries "
                          "whose key id the key map does not name, or names twice, or names a key "
                          "the agent measures (key_out_of_range: skipped), or whose value is not "
                          "UTF-8 (invalid_value: skipped).",
                          {{"result", kRecordNames[i]}})
              .value();
    }
    for (size_t i = 0; i < kTlsMetrics; ++i) {
      tls[i] = registry
                   .AddCounter("ember_thread_context_tls_resolutions_total",
                               "Resolutions of where a process's threads keep their "
                               "otel_thread_ctx_v1 pointer: ok (the BPF program reads it), "
                               "not_found (no mapped file defines it yet), failed (unsupported "
                               "or unreadable), bpf_failed (the BPF map refused the entry).",
                               {{"result", kTlsNames[i]}})
                   .value();
    }
    for (size_t i = 0; i < kNoticeMetrics; ++i) {
      notices[i] = registry
                       .AddCounter("ember_trace_context_notices_total",
                                   "Re-publications of a process context noticed (the naming "
                                   "prctl): read now, deferred (a read of that process within "
                                   "the last second), unknown_process (never sampled: read at "
                                   "its first sample).",
                                   {{"result", kNoticeNames[i]}})
                       .value();
    }
    const auto gauge = [&](const char* state) {
      return registry
          .AddGauge("ember_trace_context_processes",
                    "Processes by what they publish: published (a process context), "
                    "thread_context (its threads' records are read), tls_unresolved (a thread "
                    "context whose TLS variable is not found yet), other_schema (a thread-context "
                    "schema Ember does not read).",
                    {{"state", state}})
          .value();
    };
    published = gauge("published");
    thread_context = gauge("thread_context");
    tls_unresolved = gauge("tls_unresolved");
    other_schema = gauge("other_schema");
  }

  Gauge* ThreadGauge(ThreadState state) const {
    switch (state) {
      case ThreadState::kEnabled:
        return thread_context;
      case ThreadState::kUnresolved:
        return tls_unresolved;
      case ThreadState::kOtherSchema:
        return other_schema;
      case ThreadState::kNone:
        return nullptr;
    }
    return nullptr;
  }

  std::array<Counter*, kReadResults> reads{};
  Counter* skipped = nullptr;
  std::array<Counter*, kRecordMetrics> records{};
  std::array<Counter*, kTlsMetrics> tls{};
  std::array<Counter*, kNoticeMetrics> notices{};
  Gauge* published = nullptr;
  Gauge* thread_context = nullptr;
  Gauge* tls_unresolved = nullptr;
  Gauge* other_schema = nullptr;
};

TraceContexts::TraceContexts(ThreadContextBpfConfig* bpf, MetricsRegistry& metrics,
                             TraceContextsHooks hooks, TraceContextsOptions options)
    : bpf_(bpf),
      hooks_(std::move(hooks)),
      options_(std::move(options)),
      metrics_(std::make_unique<Metrics>(metrics)) {}

TraceContexts::~TraceContexts() {
  // The gauges count this object's processes: they go with it. The BPF side may be gone already
  // (it goes with the program).
  bpf_ = nullptr;
  for (auto& [pid, state] : states_) Reset(pid, state);
}

std::chrono::steady_clock::time_point TraceContexts::Now() const {
  return hooks_.now ? hooks_.now() : std::chrono::steady_clock::now();
}

std::unique_ptr<MemoryReader> TraceContexts::MemoryOf(uint32_t pid) const {
  if (hooks_.memory) return hooks_.memory(pid);
  return std::make_unique<ProcessMemoryReader>(static_cast<pid_t>(pid));
}

void TraceContexts::SetThread(State& state, ThreadState thread) {
  if (state.thread == thread) return;
  if (Gauge* before = metrics_->ThreadGauge(state.thread)) before->Add(-1);
  if (Gauge* after = metrics_->ThreadGauge(thread)) after->Add(1);
  state.thread = thread;
}

void TraceContexts::SetHasContext(State& state, bool has_context) {
  if (state.has_context == has_context) return;
  metrics_->published->Add(has_context ? 1 : -1);
  state.has_context = has_context;
}

void TraceContexts::Reset(uint32_t pid, State& state) {
  if (state.thread == ThreadState::kEnabled && bpf_ != nullptr) {
    bpf_->RemoveThreadContextProcess(pid);
  }
  SetThread(state, ThreadState::kNone);
  SetHasContext(state, false);
  state.context = ProcessContext{};
  state.has_mapping = false;
}

void TraceContexts::OnMapsChanged(const Process& process) {
  auto [it, first_sight] = states_.try_emplace(process.pid);
  State& state = it->second;
  if (!first_sight && state.execs != process.execs) {
    // A new program: what the old one published is gone with its memory.
    Reset(process.pid, state);
    state.read_once = false;
  }
  state.execs = process.execs;
  if (!state.read_once) {
    Refresh(process.pid, state, &process, /*read_maps=*/true);
  } else if (!state.has_context) {
    RefreshOrDefer(process.pid, state, &process, Pending::kMaps);
  } else if (state.thread == ThreadState::kUnresolved) {
    RefreshOrDefer(process.pid, state, &process, Pending::kHeader);
  }
}

void TraceContexts::OnExited(uint32_t pid) {
  auto it = states_.find(pid);
  if (it == states_.end()) return;
  if (it->second.has_context && !it->second.context.resource.empty()) {
    exited_published_[pid] = it->second.context.resource;
  }
  Reset(pid, it->second);
  states_.erase(it);
  pending_.erase(pid);
}

void TraceContexts::Notice(uint32_t pid) {
  auto it = states_.find(pid);
  if (it == states_.end()) {
    metrics_->notices[kNoticeUnknown]->Increment();
    return;
  }
  State& state = it->second;
  const Process* process = hooks_.find_process ? hooks_.find_process(pid) : nullptr;
  // A notice is news: an update that was torn may now be whole.
  state.torn_retries = 0;
  const bool deferred = Now() - state.last_read < options_.min_reread;
  metrics_->notices[deferred ? kNoticeDeferred : kNoticeRead]->Increment();
  RefreshOrDefer(pid, state, process, state.has_mapping ? Pending::kHeader : Pending::kMaps);
  // The BPF side passes one notice per process per EMBER_CONTEXT_NOTICE_GAP_NS: an update just
  // after this one comes with no notice of its own, so the header is looked at once more when
  // min_reread has passed (a read of 32 bytes when nothing changed).
  if (!deferred && state.has_mapping && state.pending == Pending::kNone) {
    state.pending = Pending::kHeader;
    pending_.insert(pid);
  }
}

void TraceContexts::RefreshOrDefer(uint32_t pid, State& state, const Process* process,
                                   Pending what) {
  if (Now() - state.last_read >= options_.min_reread) {
    Refresh(pid, state, process, what == Pending::kMaps);
    return;
  }
  // A maps read covers a header read.
  if (state.pending != Pending::kMaps) state.pending = what;
  pending_.insert(pid);
}

void TraceContexts::Upkeep() {
  if (pending_.empty()) return;
  const auto now = Now();
  std::vector<uint32_t> due;
  for (uint32_t pid : pending_) {
    auto it = states_.find(pid);
    if (it == states_.end() || now - it->second.last_read >= options_.min_reread) {
      due.push_back(pid);
    }
  }
  for (uint32_t pid : due) {
    pending_.erase(pid);
    auto it = states_.find(pid);
    if (it == states_.end() || it->second.pending == Pending::kNone) continue;
    const Process* process = hooks_.find_process ? hooks_.find_process(pid) : nullptr;
    Refresh(pid, it->second, process, it->second.pending == Pending::kMaps);
  }
}

void TraceContexts::Refresh(uint32_t pid, State& state, const Process* process, bool read_maps) {
  state.last_read = Now();
  state.read_once = true;
  const Pending was_pending = std::exchange(state.pending, Pending::kNone);
  pending_.erase(pid);
  std::unique_ptr<MemoryReader> memory = MemoryOf(pid);
  const uint64_t known = state.has_context ? state.context.published_at_ns : 0;
  if (!read_maps && state.has_mapping) {
    const ReadResult result = ReadProcessContext(*memory, state.mapping, known, &raw_);
    if (!IsRefusedMapping(result)) {
      Apply(pid, state, process, *memory, result, was_pending);
      return;
    }
    // The mapping known may be gone (and another published): the maps tell.
    metrics_->reads[static_cast<size_t>(result)]->Increment();
  }
  const std::string dir = process != nullptr && !process->proc_dir.empty()
                              ? process->proc_dir
                              : absl::StrCat(options_.proc_root, "/", pid);
  auto candidates = FindContextMappingsInFile(dir + "/maps");
  if (!candidates.ok()) {
    metrics_->reads[static_cast<size_t>(ReadResult::kUnreadable)]->Increment();
    return;
  }
  // The first candidate with a context's signature and version is the process's; the others
  // (decoys, a stale mapping) are counted by why they were refused.
  ReadResult result = ReadResult::kNoMapping;
  for (const MemoryMapping& candidate : *candidates) {
    const bool same = state.has_mapping && candidate.start == state.mapping.start;
    result = ReadProcessContext(*memory, candidate, same ? known : 0, &raw_);
    if (IsRefusedMapping(result)) {
      metrics_->reads[static_cast<size_t>(result)]->Increment();
      continue;
    }
    state.mapping = candidate;
    state.has_mapping = true;
    Apply(pid, state, process, *memory, result, was_pending);
    return;
  }
  if (result == ReadResult::kNoMapping) {
    metrics_->reads[static_cast<size_t>(result)]->Increment();
  }
  // No context there (any more): a publisher may withdraw it at its SDK's shutdown.
  Reset(pid, state);
}

void TraceContexts::Apply(uint32_t pid, State& state, const Process* process, MemoryReader& memory,
                          ReadResult result, Pending was_pending) {
  const auto count = [&](ReadResult counted) {
    metrics_->reads[static_cast<size_t>(counted)]->Increment();
  };
  switch (result) {
    case ReadResult::kOk: {
      ProcessContext context;
      if (!DecodeProcessContext(raw_.payload, &context)) {
        count(ReadResult::kBadPayload);
        return;
      }
      count(ReadResult::kOk);
      metrics_->skipped->Increment(context.skipped_attributes);
      context.published_at_ns = raw_.published_at_ns;
      state.torn_retries = 0;
      const bool schema_changed = context.schema_version != state.context.schema_version;
      state.context = std::move(context);
      SetHasContext(state, true);
      if (schema_changed && state.thread == ThreadState::kEnabled &&
          !IsTlsSchema(state.context.schema_version)) {
        if (bpf_ != nullptr) bpf_->RemoveThreadContextProcess(pid);
        SetThread(state, ThreadState::kNone);
      }
      UpdateThread(pid, state, process, memory);
      return;
    }
    case ReadResult::kUnchanged:
      count(result);
      UpdateThread(pid, state, process, memory);
      return;
    case ReadResult::kTorn:
      count(result);
      if (state.torn_retries++ < options_.max_torn_retries) {
        state.pending = was_pending == Pending::kMaps ? Pending::kMaps : Pending::kHeader;
        pending_.insert(pid);
      }
      return;
    default:
      count(result);
      return;
  }
}

void TraceContexts::UpdateThread(uint32_t pid, State& state, const Process* process,
                                 MemoryReader& memory) {
  if (!IsTlsSchema(state.context.schema_version)) {
    SetThread(state, state.context.schema_version.empty() ? ThreadState::kNone
                                                          : ThreadState::kOtherSchema);
    return;
  }
  if (state.thread == ThreadState::kEnabled) return;  // where the variable is does not move
  SetThread(state, ThreadState::kUnresolved);
  // Without the process's mappings there is nothing to look in: its next maps change retries.
  if (!hooks_.resolve_tls || process == nullptr) return;
  absl::StatusOr<ember_context_proc> config = hooks_.resolve_tls(*process, memory);
  if (!config.ok()) {
    metrics_->tls[absl::IsNotFound(config.status()) ? kTlsNotFound : kTlsFailed]->Increment();
    return;
  }
  if (bpf_ != nullptr && !bpf_->SetThreadContextProcess(pid, *config).ok()) {
    metrics_->tls[kTlsBpfFailed]->Increment();
    return;
  }
  metrics_->tls[kTlsOk]->Increment();
  SetThread(state, ThreadState::kEnabled);
}

SampleContext TraceContexts::ContextOf(const Process* process, const SampleView& sample) {
  const ember_sample& header = *sample.header;
  switch (header.context_status) {
    case EMBER_CONTEXT_NOT_READ:
      return {};
    case EMBER_CONTEXT_OK:
      break;
    case EMBER_CONTEXT_NONE:
      metrics_->records[kRecordNone]->Increment();
      return {};
    case EMBER_CONTEXT_READ_FAILED:
      metrics_->records[kRecordReadFailed]->Increment();
      return {};
    case EMBER_CONTEXT_NO_TLS_BLOCK:
      metrics_->records[kRecordNoTlsBlock]->Increment();
      return {};
    default:  // EMBER_CONTEXT_INVALID, or a status this agent does not know
      metrics_->records[kRecordInvalid]->Increment();
      return {};
  }
  auto it = states_.find(header.pid);
  State* state = it != states_.end() ? &it->second : nullptr;
  // A record of the program before an exec has no names in the new one's key map.
  if (state != nullptr && process != nullptr && process->execs != state->execs) state = nullptr;
  std::span<const std::string> key_map;
  if (state != nullptr) key_map = state->context.key_map;
  RecordOutcome outcome;
  SampleContext context = decoder_.Decode(sample.thread_context, key_map, &outcome);
  switch (outcome.result) {
    case RecordOutcome::Result::kOk:
      metrics_->records[kRecordOk]->Increment();
      break;
    case RecordOutcome::Result::kNoTrace:
      metrics_->records[kRecordNoTrace]->Increment();
      break;
    case RecordOutcome::Result::kInvalid:
      metrics_->records[kRecordInvalid]->Increment();
      break;
  }
  if (outcome.attribute_truncated) metrics_->records[kRecordAttributeTruncated]->Increment();
  if (outcome.keys_out_of_range > 0) metrics_->records[kRecordKeyOutOfRange]->Increment();
  if (outcome.invalid_values > 0) metrics_->records[kRecordInvalidValue]->Increment();
  // The key map is append-only: an id past its end means a longer one was published.
  if (outcome.key_map_stale && state != nullptr && state->pending == Pending::kNone) {
    state->pending = Pending::kHeader;
    pending_.insert(header.pid);
  }
  return context;
}

const std::vector<ProcessLabel>* TraceContexts::Published(uint32_t pid) const {
  auto it = states_.find(pid);
  if (it == states_.end() || !it->second.has_context || it->second.context.resource.empty()) {
    auto exited = exited_published_.find(pid);
    return exited != exited_published_.end() ? &exited->second : nullptr;
  }
  return &it->second.context.resource;
}

}  // namespace ember::context
