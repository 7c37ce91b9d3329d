// BpfUnwindTables against a fake row map and a fake table source: which rows land where, what each
// process's entry says, when tables are built, and when their room is reused. One test builds the
// real tables of this process's own files.
#include "sampler/bpf_unwind_tables.h"

#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "process/proc_maps.h"
#include "support/elf_image_builder.h"
#include "unwind/elf_image.h"
#include "unwind/unwind_table.h"

namespace ember {
namespace {

using std::chrono::steady_clock;

// The BPF maps: rows and buckets in vectors of the map's capacity (a file's buckets sit at the
// index of its rows), entries by pid.
class FakeMaps : public UnwindMaps {
 public:
  explicit FakeMaps(uint32_t capacity) : rows_(capacity), buckets_(capacity) {}

  absl::Status WriteRows(uint32_t first, std::span<const ember_unwind_row> rows) override {
    if (!Inside(first, rows.size(), "rows")) return absl::OutOfRangeError("outside the row map");
    if (fail_writes_) return absl::InternalError("bpf_map_update_elem: EPERM");
    std::copy(rows.begin(), rows.end(), rows_.begin() + first);
    return absl::OkStatus();
  }
  absl::Status WriteBuckets(uint32_t first, std::span<const uint32_t> buckets) override {
    if (!Inside(first, buckets.size(), "buckets")) {
      return absl::OutOfRangeError("outside the bucket map");
    }
    std::copy(buckets.begin(), buckets.end(), buckets_.begin() + first);
    return absl::OkStatus();
  }
  absl::Status SetProcess(uint32_t pid, const ember_unwind_proc& proc) override {
    EXPECT_LE(proc.count, uint32_t{EMBER_MAX_UNWIND_MAPPINGS}) << "pid " << pid;
    procs_[pid] = proc;
    return absl::OkStatus();
  }
  void RemoveProcess(uint32_t pid) override { procs_.erase(pid); }

  const ember_unwind_proc* Entry(uint32_t pid) const {
    auto it = procs_.find(pid);
    return it == procs_.end() ? nullptr : &it->second;
  }
  std::vector<ember_unwind_row> Rows(uint32_t first, uint32_t count) const {
    if (first > rows_.size() || count > rows_.size() - first) return {};
    return {rows_.begin() + first, rows_.begin() + first + count};
  }
  std::vector<uint32_t> Buckets(uint32_t first, uint32_t count) const {
    if (first > buckets_.size() || count > buckets_.size() - first) return {};
    return {buckets_.begin() + first, buckets_.begin() + first + count};
  }
  void FailWrites(bool fail) { fail_writes_ = fail; }

 private:
  bool Inside(uint32_t first, size_t count, const char* what) const {
    if (first <= rows_.size() && count <= rows_.size() - first) return true;
    ADD_FAILURE() << what << " [" << first << ", " << first + count << ") written outside maps of "
                  << rows_.size();
    return false;
  }

  std::vector<ember_unwind_row> rows_;
  std::vector<uint32_t> buckets_;
  std::map<uint32_t, ember_unwind_proc> procs_;
  bool fail_writes_ = false;
};

// What tells one row from another here: rows of different files have different pcs.
using RowKey = std::tuple<uint64_t, int32_t, int16_t, uint8_t, uint8_t>;

std::vector<RowKey> Keys(const std::vector<ember_unwind_row>& rows) {
  std::vector<RowKey> keys;
  for (const ember_unwind_row& r : rows) {
    keys.emplace_back(r.pc, r.cfa_offset, r.bp_offset, r.kind, r.bp_rule);
  }
  return keys;
}

// Stands in for reading files: `row_count` rows per file (3 unless told), with pcs no other file
// has, and the layout set for the file's name (else the default).
class FakeSource {
 public:
  explicit FakeSource(LoadLayout layout) : default_layout_(std::move(layout)) {}

  BpfUnwindTables::TableSource Source() {
    return [this](const ExecutableMapping& m) { return Table(m); };
  }
  void SetRowCount(const std::string& name, uint32_t count) { row_counts_[name] = count; }
  void SetLayout(const std::string& name, LoadLayout layout) { layouts_[name] = std::move(layout); }
  void Fail(const std::string& name) { failing_.push_back(name); }
  void SleepFor(std::chrono::milliseconds duration) { sleep_ = duration; }

  int calls(const std::string& name) const {
    auto it = calls_.find(name);
    return it == calls_.end() ? 0 : it->second;
  }
  int total_calls() const {
    int total = 0;
    for (const auto& [name, count] : calls_) total += count;
    return total;
  }
  std::vector<ember_unwind_row> RowsOf(const std::string& name) {
    auto [it, inserted] = ids_.try_emplace(name, ids_.size() + 1);
    auto count = row_counts_.find(name);
    std::vector<ember_unwind_row> rows(count == row_counts_.end() ? 3 : count->second);
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i] = {.pc = (it->second << 32) + 16 * i,
                 .cfa_offset = static_cast<int32_t>(8 * (i + 1)),
                 .bp_offset = -16,
                 .kind = EMBER_UNWIND_ROW_CFA_SP,
                 .bp_rule = EMBER_UNWIND_BP_SAVED};
    }
    return rows;
  }
  const LoadLayout& LayoutOf(const std::string& name) const {
    auto it = layouts_.find(name);
    return it == layouts_.end() ? default_layout_ : it->second;
  }

 private:
  absl::StatusOr<FileUnwindTable> Table(const ExecutableMapping& m) {
    ++calls_[m.path];
    if (sleep_.count() > 0) std::this_thread::sleep_for(sleep_);
    if (std::find(failing_.begin(), failing_.end(), m.path) != failing_.end()) {
      return absl::NotFoundError(absl::StrCat(m.path, ": no .eh_frame_hdr"));
    }
    return FileUnwindTable{.rows = RowsOf(m.path), .layout = LayoutOf(m.path)};
  }

  LoadLayout default_layout_;
  std::map<std::string, uint32_t> row_counts_;
  std::map<std::string, LoadLayout> layouts_;
  std::map<std::string, uint64_t> ids_;
  std::map<std::string, int> calls_;
  std::vector<std::string> failing_;
  std::chrono::milliseconds sleep_{0};
};

std::vector<MemoryMapping> OwnMaps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream text;
  text << in.rdbuf();
  auto maps = ParseProcMaps(text.str());
  EXPECT_TRUE(maps.ok()) << maps.status();
  return maps.ok() ? *std::move(maps) : std::vector<MemoryMapping>{};
}

ExecutableMapping ToExecutable(const MemoryMapping& m) {
  return {{.start = m.start, .end = m.end, .offset = m.offset, .file = m.file, .path = m.path},
          m.IsFileBacked() ? m.path : ""};
}

// The executable mapping of this process that holds `address`, with the layout of its file.
struct RealText {
  ExecutableMapping mapping;
  LoadLayout layout;
};

RealText TextHolding(uint64_t address) {
  RealText text;
  for (const MemoryMapping& m : OwnMaps()) {
    if (m.executable && m.IsFileBacked() && m.start <= address && address < m.end) {
      text.mapping = ToExecutable(m);
    }
  }
  EXPECT_FALSE(text.mapping.path.empty()) << "no file-backed text holds 0x" << std::hex << address;
  if (text.mapping.path.empty()) return text;
  auto image = ElfImage::Open(text.mapping.path);
  EXPECT_TRUE(image.ok()) << image.status();
  if (image.ok()) text.layout = (*image)->layout();
  return text;
}

// A non-PIE executable's layout, whose ELF addresses are not its file offsets: headers at 0x400000,
// text from offset 0x1000 at 0x401000. (This binary and libc are linked with ELF address equal to
// file offset, which would hide a bias taken from the offset alone.)
RealText NonPieExecutable() {
  const std::vector<Elf64_Phdr> phdrs = {{.p_type = PT_LOAD,
                                          .p_flags = PF_R,
                                          .p_offset = 0,
                                          .p_vaddr = 0x400000,
                                          .p_paddr = 0x400000,
                                          .p_filesz = 0x1000,
                                          .p_memsz = 0x1000,
                                          .p_align = 0x1000},
                                         {.p_type = PT_LOAD,
                                          .p_flags = PF_R | PF_X,
                                          .p_offset = 0x1000,
                                          .p_vaddr = 0x401000,
                                          .p_paddr = 0x401000,
                                          .p_filesz = 0x2000,
                                          .p_memsz = 0x2000,
                                          .p_align = 0x1000}};
  const std::string path = ::testing::TempDir() + "bpf_unwind_tables_non_pie";
  EXPECT_TRUE(testing::WriteElfImage(
      path, {.type = ET_EXEC, .entry = 0x401000, .program_headers = phdrs, .size = 0x3000}));

  RealText text;
  text.mapping = {{.start = 0x401000,
                   .end = 0x403000,
                   .offset = 0x1000,
                   .file = {.dev = 0xfd02, .inode = 77},
                   .path = path},
                  path};
  auto opened = ElfImage::Open(path);
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (opened.ok()) text.layout = (*opened)->layout();
  return text;
}

uint64_t OwnFunction() { return reinterpret_cast<uint64_t>(&OwnMaps); }
uint64_t LibcFunction() { return reinterpret_cast<uint64_t>(dlsym(RTLD_DEFAULT, "qsort")); }

const RealText& OwnText() {
  static const RealText* text = new RealText(TextHolding(OwnFunction()));
  return *text;
}

// A made-up file mapped like this test binary's text (so the binary's layout places it), at its
// own address and with its own identity.
ExecutableMapping FakeFile(int n) {
  const ExecutableMapping& own = OwnText().mapping;
  const uint64_t start = 0x7e0000000000 + static_cast<uint64_t>(n) * 0x10000000;
  return {{.start = start,
           .end = start + (own.end - own.start),
           .offset = own.offset,
           .file = {.dev = 0xfd01, .inode = 1000 + static_cast<uint64_t>(n)},
           .path = absl::StrCat("/usr/lib/fake/lib", n, ".so")},
          absl::StrCat("/proc/1/map_files/lib", n)};
}

const ember_unwind_mapping* EntryMapping(const ember_unwind_proc* entry, uint64_t start) {
  if (entry == nullptr) return nullptr;
  for (uint32_t i = 0; i < entry->count && i < EMBER_MAX_UNWIND_MAPPINGS; ++i) {
    if (entry->mappings[i].start == start) return &entry->mappings[i];
  }
  return nullptr;
}

std::vector<uint64_t> Starts(const ember_unwind_proc* entry) {
  std::vector<uint64_t> starts;
  if (entry == nullptr) return starts;
  for (uint32_t i = 0; i < entry->count && i < EMBER_MAX_UNWIND_MAPPINGS; ++i) {
    starts.push_back(entry->mappings[i].start);
  }
  return starts;
}

// The entry places `mapping` and points at exactly its file's rows.
void ExpectMapped(const FakeMaps& maps, FakeSource& source, uint32_t pid,
                  const ExecutableMapping& mapping) {
  SCOPED_TRACE(absl::StrCat("pid ", pid, ", ", mapping.path));
  const ember_unwind_mapping* entry = EntryMapping(maps.Entry(pid), mapping.start);
  ASSERT_NE(entry, nullptr) << "not in the entry";
  EXPECT_EQ(entry->end, mapping.end);
  std::optional<ModulePlacement> placement =
      source.LayoutOf(mapping.path).Place(mapping.start, mapping.end, mapping.offset);
  ASSERT_TRUE(placement.has_value());
  EXPECT_EQ(entry->bias, placement->bias);
  const std::vector<ember_unwind_row> rows = source.RowsOf(mapping.path);
  EXPECT_EQ(Keys(maps.Rows(entry->first_row, entry->row_count)), Keys(rows));
  // The walk finds those rows through the file's buckets, at the same index.
  const UnwindBuckets buckets = BucketsOf(rows);
  EXPECT_EQ(entry->table_base, buckets.base);
  EXPECT_EQ(entry->bucket_shift, buckets.shift);
  EXPECT_EQ(maps.Buckets(entry->first_row, entry->bucket_count), buckets.first_rows);
}

// The processes of these tests run until a test says otherwise.
bool AllRunning(uint32_t) { return true; }

// Builds every queued table: with the whole time as share, no build waits for another.
int BuildAll(BpfUnwindTables& tables) { return tables.BuildPending(steady_clock::now()); }

// Most tests queue a file as soon as a process maps it; the waiting for short walks has its own.
constexpr BpfUnwindTables::BuildThreshold kBuildAtOnce{.min_short_walks = 0};
// Three samples stopped in a file queue it, whatever its size.
constexpr BpfUnwindTables::BuildThreshold kAfterThreeWalks{.min_short_walks = 3,
                                                           .code_bytes_per_short_walk = 0};

// An address in file n's code as FakeFile maps it.
uint64_t In(int n) { return FakeFile(n).start + 64; }

// A sample of `pid` whose stack the BPF walk did not take whole, with these user frames.
void FellShort(BpfUnwindTables& tables, uint32_t pid, const std::vector<uint64_t>& pcs) {
  tables.WalkFellShort(pid, pcs);
}

TEST(BpfUnwindTablesTest, EntryAppearsOnceItsFilesAreBuiltSortedWithTheirRowsAndBias) {
  const RealText& own = OwnText();
  const RealText libc = TextHolding(LibcFunction());
  ASSERT_FALSE(libc.mapping.path.empty());
  const RealText non_pie = NonPieExecutable();
  FakeMaps maps(64);
  FakeSource source(own.layout);
  source.SetLayout(libc.mapping.path, libc.layout);
  source.SetLayout(non_pie.mapping.path, non_pie.layout);
  source.SetRowCount(own.mapping.path, 5);
  source.SetRowCount(libc.mapping.path, 7);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning, kBuildAtOnce);

  // Handed over in descending order of address.
  std::vector<ExecutableMapping> mappings = {own.mapping, non_pie.mapping, libc.mapping};
  std::sort(mappings.begin(), mappings.end(),
            [](const auto& a, const auto& b) { return a.start > b.start; });
  tables.SetProcess(42, mappings);
  EXPECT_EQ(maps.Entry(42), nullptr) << "an entry before any table was built";
  EXPECT_EQ(tables.pending(), 3u);
  EXPECT_EQ(tables.stats().files_queued, 3u);
  EXPECT_EQ(source.total_calls(), 0);

  EXPECT_EQ(BuildAll(tables), 3);
  EXPECT_EQ(tables.pending(), 0u);
  const ember_unwind_proc* entry = maps.Entry(42);
  ASSERT_NE(entry, nullptr);
  ASSERT_EQ(entry->count, 3u);
  EXPECT_LT(entry->mappings[0].start, entry->mappings[1].start);
  EXPECT_LT(entry->mappings[1].start, entry->mappings[2].start);
  ExpectMapped(maps, source, 42, own.mapping);
  ExpectMapped(maps, source, 42, libc.mapping);
  ExpectMapped(maps, source, 42, non_pie.mapping);
  // The bias takes a process address to the ELF address of the same instruction: a non-PIE
  // executable runs at its own ELF addresses.
  const ember_unwind_mapping* non_pie_entry = EntryMapping(entry, non_pie.mapping.start);
  ASSERT_NE(non_pie_entry, nullptr);
  EXPECT_EQ(non_pie_entry->bias, 0u);
  const BpfUnwindTablesStats stats = tables.stats();
  EXPECT_EQ(stats.files_loaded, 3u);
  EXPECT_EQ(stats.rows_used, 15u);
  EXPECT_EQ(stats.processes, 1u);
  EXPECT_EQ(stats.tables_built, 3u);
}

TEST(BpfUnwindTablesTest, ProcessesMappingTheSameFileShareOneCopyOfItsRows) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping shared = FakeFile(1);
  const ExecutableMapping only_first = FakeFile(2);
  // The other process maps the same file (same dev and inode) at another address.
  ExecutableMapping shared_elsewhere = FakeFile(3);
  shared_elsewhere.file = shared.file;
  shared_elsewhere.path = shared.path;

  tables.SetProcess(1, {shared, only_first});
  tables.SetProcess(2, {shared_elsewhere});
  EXPECT_EQ(tables.pending(), 2u);
  EXPECT_EQ(BuildAll(tables), 2);
  EXPECT_EQ(source.calls(shared.path), 1);
  ExpectMapped(maps, source, 1, shared);
  ExpectMapped(maps, source, 1, only_first);
  ExpectMapped(maps, source, 2, shared_elsewhere);
  const ember_unwind_mapping* a = EntryMapping(maps.Entry(1), shared.start);
  const ember_unwind_mapping* b = EntryMapping(maps.Entry(2), shared_elsewhere.start);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->first_row, b->first_row);
  EXPECT_EQ(a->row_count, b->row_count);
  EXPECT_NE(a->bias, b->bias);
  EXPECT_EQ(tables.stats().rows_used, 6u);

  // A process that comes later gets its entry at once, without another build.
  tables.SetProcess(3, {shared});
  EXPECT_EQ(tables.pending(), 0u);
  ExpectMapped(maps, source, 3, shared);
  EXPECT_EQ(source.calls(shared.path), 1);
  EXPECT_EQ(tables.stats().rows_used, 6u);
}

TEST(BpfUnwindTablesTest, LeavesOutMemoryThatIsNoFileButLoadsTheVdso) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping file = FakeFile(1);
  auto other = [&](int n, std::string name, uint64_t inode) {
    ExecutableMapping m = FakeFile(n);
    m.path = std::move(name);
    m.open_path = "";
    m.file = {.dev = inode == 0 ? uint64_t{0} : uint64_t{0xfd01}, .inode = inode};
    return m;
  };
  const ExecutableMapping anonymous = other(2, "", 0);
  const ExecutableMapping named_anonymous = other(3, "[anon:jit]", 0);
  const ExecutableMapping not_a_path = other(4, "memfd:jit", 77);
  const ExecutableMapping path_without_inode = other(5, "/no/inode", 0);
  const ExecutableMapping vsyscall = other(6, "[vsyscall]", 0);
  const ExecutableMapping vdso = other(7, "[vdso]", 0);

  tables.SetProcess(
      1, {anonymous, file, named_anonymous, not_a_path, path_without_inode, vsyscall, vdso});
  EXPECT_EQ(tables.pending(), 2u);
  EXPECT_EQ(BuildAll(tables), 2);
  EXPECT_EQ(source.calls(file.path), 1);
  EXPECT_EQ(source.calls("[vdso]"), 1);
  EXPECT_EQ(source.total_calls(), 2);
  EXPECT_EQ(Starts(maps.Entry(1)), (std::vector<uint64_t>{file.start, vdso.start}));
  ExpectMapped(maps, source, 1, file);
  ExpectMapped(maps, source, 1, vdso);
}

TEST(BpfUnwindTablesTest, FileWithoutTableIsLeftOutAndNotRetried) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping good = FakeFile(1);
  const ExecutableMapping bad = FakeFile(2);
  source.Fail(bad.path);

  tables.SetProcess(1, {good, bad});
  EXPECT_EQ(BuildAll(tables), 2);
  EXPECT_EQ(Starts(maps.Entry(1)), std::vector<uint64_t>{good.start});
  ExpectMapped(maps, source, 1, good);
  EXPECT_EQ(tables.stats().files_without_rows, 1u);
  EXPECT_EQ(tables.stats().files_loaded, 1u);
  EXPECT_EQ(tables.stats().rows_used, 3u);

  // Neither the same process's next look at its maps nor another process queues it again.
  tables.SetProcess(1, {good, bad});
  tables.SetProcess(2, {bad});
  EXPECT_EQ(tables.pending(), 0u);
  EXPECT_EQ(BuildAll(tables), 0);
  EXPECT_EQ(source.calls(bad.path), 1);
  EXPECT_EQ(maps.Entry(2), nullptr);
  EXPECT_EQ(Starts(maps.Entry(1)), std::vector<uint64_t>{good.start});
  EXPECT_EQ(tables.stats().files_without_rows, 1u);
}

TEST(BpfUnwindTablesTest, BuildsTablesWithinTheTimeShare) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  source.SleepFor(std::chrono::milliseconds(20));
  BpfUnwindTables tables(maps, 64, source.Source(), 0.5, AllRunning, kBuildAtOnce);
  tables.SetProcess(1, {FakeFile(1), FakeFile(2), FakeFile(3)});
  ASSERT_EQ(tables.pending(), 3u);

  const steady_clock::time_point before = steady_clock::now();
  EXPECT_EQ(tables.BuildPending(before), 1);
  const steady_clock::time_point after = steady_clock::now();
  // The oldest queued first.
  EXPECT_EQ(source.calls(FakeFile(1).path), 1);
  EXPECT_EQ(Starts(maps.Entry(1)), std::vector<uint64_t>{FakeFile(1).start});
  const std::chrono::nanoseconds took = tables.stats().build_time;
  ASSERT_GE(took, std::chrono::milliseconds(20));

  EXPECT_EQ(tables.BuildPending(before), 0);
  // At half the time, the next build waits as long as the last one took, from its end (which
  // came after before + took).
  EXPECT_EQ(tables.BuildPending(before + took), 0);
  EXPECT_EQ(tables.pending(), 2u);
  EXPECT_EQ(source.total_calls(), 1);
  EXPECT_EQ(tables.BuildPending(after + took), 1);
  EXPECT_EQ(source.calls(FakeFile(2).path), 1);
  EXPECT_EQ(tables.pending(), 1u);
}

TEST(BpfUnwindTablesTest, FilesOfProcessesThatExitedBeforeTheirBuildAreNotBuilt) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  std::set<uint32_t> exited;
  BpfUnwindTables tables(
      maps, 64, source.Source(), 1.0, [&exited](uint32_t pid) { return !exited.contains(pid); },
      kBuildAtOnce);
  // A short-lived process and a long-lived one share file 2; file 1 is the short one's alone.
  tables.SetProcess(10, {FakeFile(1), FakeFile(2)});
  tables.SetProcess(11, {FakeFile(2), FakeFile(3)});
  exited.insert(10);
  EXPECT_EQ(BuildAll(tables), 2);
  EXPECT_EQ(source.calls(FakeFile(1).path), 0);
  EXPECT_EQ(source.calls(FakeFile(2).path), 1);
  EXPECT_EQ(source.calls(FakeFile(3).path), 1);
  EXPECT_EQ(maps.Entry(10), nullptr);
  EXPECT_EQ(Starts(maps.Entry(11)), (std::vector<uint64_t>{FakeFile(2).start, FakeFile(3).start}));
  BpfUnwindTablesStats stats = tables.stats();
  EXPECT_EQ(stats.dropped_exited, 1u);
  EXPECT_EQ(stats.processes, 1u);
  EXPECT_EQ(stats.files_queued, 0u);
  EXPECT_EQ(stats.files_loaded, 2u);

  // A process that maps the dropped file later has it queued and built like any other.
  tables.SetProcess(12, {FakeFile(1)});
  EXPECT_EQ(tables.pending(), 1u);
  EXPECT_EQ(BuildAll(tables), 1);
  EXPECT_EQ(source.calls(FakeFile(1).path), 1);
  ExpectMapped(maps, source, 12, FakeFile(1));

  // Every process gone before anything was built: nothing is.
  tables.SetProcess(13, {FakeFile(4), FakeFile(5)});
  exited.insert(13);
  EXPECT_EQ(BuildAll(tables), 0);
  EXPECT_EQ(source.calls(FakeFile(4).path) + source.calls(FakeFile(5).path), 0);
  EXPECT_EQ(tables.stats().dropped_exited, 3u);
  EXPECT_EQ(tables.pending(), 0u);
}

// The process table's report of an exit (through the feed) drops at once the queued files that
// were the process's alone, without asking whether any process still runs; a file another process
// maps stays queued, and only that process is asked about before its build.
TEST(BpfUnwindTablesTest, QueuedFilesOfAProcessTheTableSaysExitedAreDroppedAtOnce) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  std::vector<uint32_t> asked;
  BpfUnwindTables tables(
      maps, 64, source.Source(), 1.0,
      [&asked](uint32_t pid) {
        asked.push_back(pid);
        return true;
      },
      kBuildAtOnce);
  ProcessTable table;
  BpfUnwindTablesFeed feed(table, tables);
  tables.SetProcess(10, {FakeFile(1), FakeFile(2)});
  tables.SetProcess(11, {FakeFile(2), FakeFile(3)});
  ASSERT_EQ(tables.pending(), 3u);
  feed.OnExited(10);
  EXPECT_EQ(tables.pending(), 2u);
  EXPECT_EQ(tables.stats().dropped_exited, 1u);
  EXPECT_EQ(tables.stats().files_queued, 2u);
  EXPECT_EQ(tables.stats().processes, 1u);
  EXPECT_EQ(maps.Entry(10), nullptr);
  EXPECT_EQ(BuildAll(tables), 2);
  EXPECT_EQ(source.calls(FakeFile(1).path), 0);
  EXPECT_EQ(Starts(maps.Entry(11)), (std::vector<uint64_t>{FakeFile(2).start, FakeFile(3).start}));
  EXPECT_FALSE(asked.empty());
  EXPECT_EQ(std::count(asked.begin(), asked.end(), 10u), 0);

  // Every process reported gone before anything was built: nothing is, and no one is asked.
  asked.clear();
  tables.SetProcess(13, {FakeFile(4), FakeFile(5)});
  feed.OnExited(13);
  EXPECT_EQ(tables.pending(), 0u);
  EXPECT_EQ(BuildAll(tables), 0);
  EXPECT_EQ(source.calls(FakeFile(4).path) + source.calls(FakeFile(5).path), 0);
  EXPECT_EQ(tables.stats().dropped_exited, 3u);
  EXPECT_TRUE(asked.empty());
  // A second report of the same exit changes nothing.
  feed.OnExited(13);
  EXPECT_EQ(tables.stats().dropped_exited, 3u);
}

TEST(BpfUnwindTablesTest, RowsOfFilesNoProcessMapsAreFreedAfterKeepGenerations) {
  FakeMaps maps(8);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 8, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping old_file = FakeFile(1);
  const ExecutableMapping new_file = FakeFile(2);
  source.SetRowCount(old_file.path, 8);
  source.SetRowCount(new_file.path, 8);

  tables.SetProcess(1, {old_file});
  BuildAll(tables);
  ASSERT_NE(maps.Entry(1), nullptr);
  tables.RemoveProcess(1);
  EXPECT_EQ(maps.Entry(1), nullptr);
  EXPECT_EQ(tables.stats().processes, 0u);
  for (int i = 0; i < 3; ++i) tables.NextGeneration(3);
  EXPECT_EQ(tables.stats().rows_used, 8u) << "freed before keep_generations passed";
  EXPECT_EQ(tables.stats().files_loaded, 1u);
  tables.NextGeneration(3);
  EXPECT_EQ(tables.stats().rows_used, 0u);
  EXPECT_EQ(tables.stats().files_loaded, 0u);

  tables.SetProcess(2, {new_file});
  BuildAll(tables);
  ExpectMapped(maps, source, 2, new_file);
  EXPECT_EQ(tables.stats().out_of_room, 0u);
  EXPECT_EQ(tables.stats().rows_used, 8u);
}

TEST(BpfUnwindTablesTest, FileALiveProcessMapsIsNeverFreed) {
  FakeMaps maps(16);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 16, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping live = FakeFile(1);
  const ExecutableMapping gone = FakeFile(2);
  const ExecutableMapping later = FakeFile(3);
  const ExecutableMapping too_big = FakeFile(4);
  source.SetRowCount(live.path, 4);
  source.SetRowCount(gone.path, 4);
  source.SetRowCount(later.path, 12);
  source.SetRowCount(too_big.path, 1);

  tables.SetProcess(1, {live});
  BuildAll(tables);
  tables.SetProcess(2, {gone});
  BuildAll(tables);
  tables.RemoveProcess(2);
  for (int i = 0; i < 10; ++i) tables.NextGeneration(3);
  EXPECT_EQ(tables.stats().files_loaded, 1u);
  EXPECT_EQ(tables.stats().rows_used, 4u);
  ExpectMapped(maps, source, 1, live);

  // The freed room and the free rows after it make one run for a longer table.
  tables.SetProcess(3, {later});
  BuildAll(tables);
  ExpectMapped(maps, source, 3, later);
  // With the map full, the live file's rows stay where they are.
  tables.SetProcess(4, {too_big});
  BuildAll(tables);
  EXPECT_EQ(tables.stats().out_of_room, 1u);
  EXPECT_EQ(maps.Entry(4), nullptr);
  ExpectMapped(maps, source, 1, live);
  ExpectMapped(maps, source, 3, later);
  EXPECT_EQ(tables.stats().rows_used, 16u);
}

TEST(BpfUnwindTablesTest, TableThatDoesNotFitIsCountedAndNothingIsWrittenOutsideTheMap) {
  FakeMaps maps(10);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 10, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping first = FakeFile(1);
  const ExecutableMapping second = FakeFile(2);
  const ExecutableMapping huge = FakeFile(3);
  source.SetRowCount(first.path, 6);
  source.SetRowCount(second.path, 6);
  source.SetRowCount(huge.path, 11);

  tables.SetProcess(1, {first});
  BuildAll(tables);
  tables.SetProcess(2, {second, huge});
  EXPECT_EQ(BuildAll(tables), 2);
  EXPECT_EQ(tables.stats().out_of_room, 2u);
  EXPECT_EQ(tables.stats().files_without_rows, 2u);
  EXPECT_EQ(tables.stats().rows_used, 6u);
  EXPECT_EQ(maps.Entry(2), nullptr);
  ExpectMapped(maps, source, 1, first);
}

TEST(BpfUnwindTablesTest, RowsOfFilesNoProcessMapsMakeRoomWhenTheMapIsFull) {
  FakeMaps maps(10);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 10, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping unmapped = FakeFile(1);
  const ExecutableMapping live = FakeFile(2);
  const ExecutableMapping next = FakeFile(3);
  source.SetRowCount(unmapped.path, 4);
  source.SetRowCount(live.path, 2);
  source.SetRowCount(next.path, 8);

  // Rows [0, 2) for the live file, [2, 6) for the other: freed, they join the free rows after.
  tables.SetProcess(2, {live});
  tables.SetProcess(1, {unmapped});
  BuildAll(tables);
  tables.RemoveProcess(1);
  // No generation has passed: only the lack of room frees the unmapped file's rows.
  tables.SetProcess(3, {next});
  BuildAll(tables);
  EXPECT_EQ(tables.stats().out_of_room, 0u);
  ExpectMapped(maps, source, 3, next);
  ExpectMapped(maps, source, 2, live);
  EXPECT_EQ(tables.stats().files_loaded, 2u);
  EXPECT_EQ(tables.stats().rows_used, 10u);
}

TEST(BpfUnwindTablesTest, EntryHoldsAtMostMaxMappingsTheLowestFirst) {
  constexpr int kFiles = 200;
  FakeMaps maps(2 * kFiles);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 2 * kFiles, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  std::vector<ExecutableMapping> mappings;
  for (int n = kFiles - 1; n >= 0; --n) {
    mappings.push_back(FakeFile(n));
    source.SetRowCount(mappings.back().path, 2);
  }

  tables.SetProcess(1, mappings);
  EXPECT_EQ(BuildAll(tables), kFiles);
  EXPECT_EQ(tables.stats().files_loaded, size_t{kFiles});
  const ember_unwind_proc* entry = maps.Entry(1);
  ASSERT_NE(entry, nullptr);
  ASSERT_EQ(entry->count, uint32_t{EMBER_MAX_UNWIND_MAPPINGS});
  std::vector<uint64_t> lowest;
  for (int n = 0; n < EMBER_MAX_UNWIND_MAPPINGS; ++n) lowest.push_back(FakeFile(n).start);
  EXPECT_EQ(Starts(entry), lowest);
  for (int n = 0; n < EMBER_MAX_UNWIND_MAPPINGS; n += 31) {
    ExpectMapped(maps, source, 1, FakeFile(n));
  }
  ExpectMapped(maps, source, 1, FakeFile(EMBER_MAX_UNWIND_MAPPINGS - 1));
}

TEST(BpfUnwindTablesTest, SetProcessAgainReplacesTheEntryAndReleasesFilesNoLongerMapped) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping dropped = FakeFile(1);
  const ExecutableMapping kept = FakeFile(2);
  const ExecutableMapping added = FakeFile(3);

  tables.SetProcess(1, {dropped, kept});
  BuildAll(tables);
  ASSERT_EQ(Starts(maps.Entry(1)), (std::vector<uint64_t>{dropped.start, kept.start}));
  tables.SetProcess(1, {kept, added});
  EXPECT_EQ(Starts(maps.Entry(1)), std::vector<uint64_t>{kept.start}) << "before the build";
  BuildAll(tables);
  EXPECT_EQ(Starts(maps.Entry(1)), (std::vector<uint64_t>{kept.start, added.start}));
  ExpectMapped(maps, source, 1, kept);
  ExpectMapped(maps, source, 1, added);
  EXPECT_EQ(tables.stats().processes, 1u);
  EXPECT_EQ(tables.stats().rows_used, 9u);

  for (int i = 0; i < 4; ++i) tables.NextGeneration(3);
  EXPECT_EQ(tables.stats().rows_used, 6u);
  EXPECT_EQ(tables.stats().files_loaded, 2u);
  ExpectMapped(maps, source, 1, kept);
  ExpectMapped(maps, source, 1, added);
}

// A failed write gives the room back; the rows other files hold are still counted.
// DISABLED: Build() calls Free(first, count) when WriteRows or WriteBuckets fails, before
// rows_used_ was increased for that table, so Free subtracts rows other files hold (here 3 -> 0).
TEST(BpfUnwindTablesTest, FailedRowWriteKeepsOtherFilesRowsCounted) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  const ExecutableMapping loaded = FakeFile(1);
  const ExecutableMapping unwritten = FakeFile(2);

  tables.SetProcess(1, {loaded});
  BuildAll(tables);
  ASSERT_EQ(tables.stats().rows_used, 3u);
  maps.FailWrites(true);
  tables.SetProcess(2, {unwritten});
  BuildAll(tables);
  EXPECT_EQ(maps.Entry(2), nullptr);
  EXPECT_EQ(tables.stats().files_without_rows, 1u);
  EXPECT_EQ(tables.stats().rows_used, 3u);
}

// With the real source: the rows of this binary and of libc as BuildUnwindTable makes them, each
// where this process's entry says, the bias taking the process's code to its file's rows.
TEST(BpfUnwindTablesTest, LoadsTheTablesOfThisProcessOwnFiles) {
  constexpr uint32_t kCapacity = 1 << 20;
  FakeMaps maps(kCapacity);
  BpfUnwindTables tables(maps, kCapacity, BpfUnwindTables::TableOfFile, 1.0, AllRunning,
                         kBuildAtOnce);
  std::vector<ExecutableMapping> mappings;
  for (const MemoryMapping& m : OwnMaps()) {
    if (m.executable) mappings.push_back(ToExecutable(m));
  }
  tables.SetProcess(7, mappings);
  EXPECT_GE(BuildAll(tables), 2);
  EXPECT_EQ(tables.stats().out_of_room, 0u);
  EXPECT_GE(tables.stats().files_loaded, 2u);

  for (uint64_t pc : {OwnFunction(), LibcFunction()}) {
    const RealText text = TextHolding(pc);
    SCOPED_TRACE(text.mapping.path);
    const ember_unwind_mapping* entry = EntryMapping(maps.Entry(7), text.mapping.start);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->end, text.mapping.end);
    auto image = ElfImage::Open(text.mapping.path);
    ASSERT_TRUE(image.ok()) << image.status();
    auto expected = BuildUnwindTable(**image);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const std::vector<ember_unwind_row> rows = maps.Rows(entry->first_row, entry->row_count);
    EXPECT_EQ(Keys(rows), Keys(*expected));
    const UnwindBuckets buckets = BucketsOf(*expected);
    EXPECT_EQ(entry->table_base, buckets.base);
    EXPECT_EQ(maps.Buckets(entry->first_row, entry->bucket_count), buckets.first_rows);
    ASSERT_FALSE(rows.empty());
    EXPECT_LE(rows.front().pc, pc - entry->bias);
    EXPECT_LT(pc - entry->bias, rows.back().pc);
  }
}

TEST(BpfUnwindTablesTest, FileIsBuiltOnlyOnceEnoughUnwalkedStacksRanThroughIt) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning, kAfterThreeWalks);
  tables.SetProcess(10, {FakeFile(1), FakeFile(2)});
  EXPECT_EQ(BuildAll(tables), 0) << "built before any sample needed it";
  EXPECT_EQ(tables.stats().files_unwanted, 2u);
  EXPECT_EQ(tables.stats().files_queued, 0u);
  // Frames in both files count once a sample for each, however many of them lie in one file.
  FellShort(tables, 10, {In(1), In(1) + 100, In(1) + 8, In(2)});
  // A caller's return address right after file 1's code is its call's, in file 1.
  FellShort(tables, 10, {In(2) + 100, FakeFile(1).end});
  EXPECT_EQ(BuildAll(tables), 0);
  EXPECT_EQ(source.total_calls(), 0);
  EXPECT_EQ(maps.Entry(10), nullptr);

  FellShort(tables, 10, {FakeFile(1).end - 1, 0, FakeFile(3).start});  // a marker; file 3: not 10's
  EXPECT_EQ(tables.stats().files_queued, 1u) << "the third sample in file 1 queues it alone";
  EXPECT_EQ(BuildAll(tables), 1);
  EXPECT_EQ(Starts(maps.Entry(10)), (std::vector<uint64_t>{FakeFile(1).start}));
  // Loaded, file 1 is in a new process's entry at once; its other file waits for walks of its own.
  tables.SetProcess(11, {FakeFile(1), FakeFile(3)});
  EXPECT_EQ(Starts(maps.Entry(11)), (std::vector<uint64_t>{FakeFile(1).start}));
  EXPECT_EQ(tables.stats().files_unwanted, 2u);
  for (int i = 0; i < 5; ++i) {
    FellShort(tables, 11, {In(1)});            // frames in a file with rows: nothing to build
    FellShort(tables, 11, {FakeFile(3).end});  // a leaf just past file 3, in no mapping
    FellShort(tables, 11, {0x1000});           // memory that is no file (JIT code)
    FellShort(tables, 99, {In(2)});            // a process it was never given
  }
  EXPECT_EQ(tables.stats().files_unwanted, 2u);
  EXPECT_EQ(BuildAll(tables), 0);
  FellShort(tables, 10, {In(2)});
  EXPECT_EQ(BuildAll(tables), 1);
  EXPECT_EQ(Starts(maps.Entry(10)), (std::vector<uint64_t>{FakeFile(1).start, FakeFile(2).start}));
  EXPECT_EQ(source.calls(FakeFile(1).path), 1);
  EXPECT_EQ(source.calls(FakeFile(2).path), 1);
  EXPECT_EQ(source.calls(FakeFile(3).path), 0);
}

TEST(BpfUnwindTablesTest, ShortWalksOfEveryProcessMappingAFileAddUp) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning, kAfterThreeWalks);
  // Three short-lived runs of one program, one sample each, as a busy shell script starts them.
  for (uint32_t pid = 20; pid < 23; ++pid) {
    tables.SetProcess(pid, {FakeFile(1)});
    FellShort(tables, pid, {In(1)});
    EXPECT_EQ(BuildAll(tables), pid == 22 ? 1 : 0) << "pid " << pid;
  }
  EXPECT_EQ(source.calls(FakeFile(1).path), 1);
  for (uint32_t pid = 20; pid < 23; ++pid) {
    EXPECT_EQ(Starts(maps.Entry(pid)), (std::vector<uint64_t>{FakeFile(1).start})) << pid;
  }
}

// A big file waits for more samples than a small one: one more per code_bytes_per_short_walk of
// its code, so a binary busy for a moment is not built.
TEST(BpfUnwindTablesTest, BiggerFilesWaitForMoreSamplesInThem) {
  FakeMaps maps(64);
  FakeSource source(OwnText().layout);
  BpfUnwindTables tables(maps, 64, source.Source(), 1.0, AllRunning,
                         {.min_short_walks = 2, .code_bytes_per_short_walk = 1000});
  ExecutableMapping small = FakeFile(1);
  small.end = small.start + 999;  // 2 samples
  ExecutableMapping big = FakeFile(2);
  big.end = big.start + 10'500;  // 2 + 10 samples
  tables.SetProcess(10, {small, big});
  int big_walks = 0;
  for (int i = 0; i < 2; ++i) {
    FellShort(tables, 10, {small.start});
    FellShort(tables, 10, {big.start});
    ++big_walks;
  }
  EXPECT_EQ(BuildAll(tables), 1);
  EXPECT_EQ(source.calls(small.path), 1);
  while (big_walks < 11) {
    FellShort(tables, 10, {big.end - 1});
    ++big_walks;
  }
  EXPECT_EQ(BuildAll(tables), 0) << "queued after " << big_walks << " samples";
  FellShort(tables, 10, {big.end - 1});
  EXPECT_EQ(BuildAll(tables), 1);
  EXPECT_EQ(source.calls(big.path), 1);
}

}  // namespace
}  // namespace ember
