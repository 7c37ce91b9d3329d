// What each sampled process published about itself through OpenTelemetry (docs/trace-context.md):
// its process context, read at first sight and again when it re-publishes, and where its threads
// keep their thread-context pointer, handed to the BPF program, which copies each sampled
// thread's record. Follows the process table's events; the cost of noticing a late or new
// publication is bounded: nothing re-reads every process, a process's maps are read at most once
// per event and at most once per min_reread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/mapping.h"
#include "common/profile.h"
#include "context/process_context.h"
#include "context/thread_record.h"
#include "process/process_events.h"
#include "process/process_table.h"
#include "runtimes/process_memory.h"
#include "sampler/runtime_bpf_config.h"
#include "sampler/sample_record_layout.h"
#include "status/metrics_registry.h"

namespace ember::context {

// Where the threads of `process` keep their otel_thread_ctx_v1 pointer, as the BPF program reads
// it; NotFound when no file it maps defines the variable (yet: a dlopen may come), other errors
// when it cannot be told now (retried at its next maps change or notice). The agent resolves it
// with FindThreadContextTls (tls_location.h).
using TlsResolver =
    std::function<absl::StatusOr<ember_context_proc>(const Process& process, MemoryReader& memory)>;

struct TraceContextsOptions {
  // Where /proc is, for a process the table no longer holds (evicted) when it re-publishes.
  std::string proc_root = "/proc";
  // The least time between two reads of one process's maps or context: events within it (a
  // storm of re-publications, a burst of maps changes) make one read when it has passed.
  std::chrono::milliseconds min_reread{1000};
  // Reads that found an update under way, tried again (after min_reread each) before waiting for
  // the next event.
  int max_torn_retries = 3;
};

// What the tracker asks of the system; tests stand in for each. (Every member has an initializer,
// so designated initializers may leave any out.)
struct TraceContextsHooks {
  // The process table's process of `pid`, if it holds it (ProcessTable::Find).
  std::function<const Process*(uint32_t pid)> find_process = {};
  // Memory of `pid`; null: ProcessMemoryReader.
  std::function<std::unique_ptr<MemoryReader>(uint32_t pid)> memory = {};
  // Null: thread contexts are not read (their processes count as tls_unresolved).
  TlsResolver resolve_tls = {};
  // Null: std::chrono::steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> now = {};
};

class TraceContexts final : public ProcessEvents {
 public:
  // `bpf` (not owned, may be null: no BPF side) is told which processes' records to copy.
  // Registers the metrics in `metrics`, which must outlive this object.
  TraceContexts(ThreadContextBpfConfig* bpf, MetricsRegistry& metrics, TraceContextsHooks hooks,
                TraceContextsOptions options = {});
  ~TraceContexts() override;
  TraceContexts(const TraceContexts&) = delete;
  TraceContexts& operator=(const TraceContexts&) = delete;

  // First sight (or an exec): the maps are read for the OTEL_CTX mapping and its context. Later
  // changes read again only what may have changed with them: the maps of a process without a
  // context yet, the TLS variable of one whose thread context is published but was not found (a
  // library that defines it may just have been dlopened).
  void OnMapsChanged(const Process& process) override;
  // Forgets the process and stops its thread-context reads.
  void OnExited(uint32_t pid) override;
  // The process re-issued the OTEP's naming prctl: it published (again). Its header is read (an
  // unchanged timestamp is all that costs), or its maps when no mapping is known. A pid never
  // sampled is passed over: its first sample reads it.
  void Notice(uint32_t pid);
  // The reads put off by min_reread whose time has come (only those: no process is read
  // otherwise). Called by the agent's loop.
  void Upkeep();

  // The sample's span and attributes from the thread-context record the BPF program copied. Its
  // views are of the sample's bytes and of this object: valid while the sample is and until the
  // next call of ContextOf, Upkeep, Notice or an event. Per sample: counts, never logs, no I/O.
  SampleContext ContextOf(const Process* process, const SampleView& sample);

  // The resource attributes `pid` published, in its order; null when none.
  const std::vector<ProcessLabel>* Published(uint32_t pid) const;
  // Forgets what processes that exited before the last call published: kept until then for the
  // interval their last samples are written in (the agent calls it at each interval's turnover,
  // before the process table tells of exits).
  void ForgetExited() { exited_published_.clear(); }

  size_t size() const { return states_.size(); }
  // Processes whose reads wait for min_reread to pass.
  size_t pending() const { return pending_.size(); }

 private:
  enum class ThreadState : uint8_t {
    kNone,         // no thread context published
    kOtherSchema,  // a schema Ember does not read (go_pprof_labels_v1, ...)
    kUnresolved,   // a TLS schema, the variable not found (yet) or not resolvable
    kEnabled,      // the BPF program copies its threads' records
  };
  enum class Pending : uint8_t { kNone, kMaps, kHeader };
  struct State {
    uint64_t execs = 0;
    bool has_mapping = false;
    // The OTEL_CTX mapping whose header had a context's signature and version, when has_mapping.
    MemoryMapping mapping;
    bool has_context = false;
    ProcessContext context;  // the last consistent read's
    ThreadState thread = ThreadState::kNone;
    Pending pending = Pending::kNone;
    int torn_retries = 0;
    bool read_once = false;
    std::chrono::steady_clock::time_point last_read;
  };
  struct Metrics;

  // Reads the context of `pid` (its maps first when `read_maps` or no mapping is known, or when
  // the known one holds none any more) and updates its thread-context state.
  void Refresh(uint32_t pid, State& state, const Process* process, bool read_maps);
  // What a read of the process's established mapping found.
  void Apply(uint32_t pid, State& state, const Process* process, MemoryReader& memory,
             ReadResult result, Pending was_pending);
  void UpdateThread(uint32_t pid, State& state, const Process* process, MemoryReader& memory);
  // Reads now when min_reread has passed since the last read, else puts it off (Upkeep).
  void RefreshOrDefer(uint32_t pid, State& state, const Process* process, Pending what);
  void SetThread(State& state, ThreadState thread);
  void SetHasContext(State& state, bool has_context);
  // Stops the BPF side's reads and drops what is known of the context (the state stays).
  void Reset(uint32_t pid, State& state);
  std::unique_ptr<MemoryReader> MemoryOf(uint32_t pid) const;
  std::chrono::steady_clock::time_point Now() const;

  ThreadContextBpfConfig* bpf_;
  TraceContextsHooks hooks_;
  TraceContextsOptions options_;
  std::unique_ptr<Metrics> metrics_;
  std::unordered_map<uint32_t, State> states_;
  // What exited processes published, until ForgetExited.
  std::unordered_map<uint32_t, std::vector<ProcessLabel>> exited_published_;
  absl::flat_hash_set<uint32_t> pending_;
  ThreadRecordDecoder decoder_;
  RawProcessContext raw_;  // reused: payloads are up to kMaxPayloadBytes
};

}  // namespace ember::context
