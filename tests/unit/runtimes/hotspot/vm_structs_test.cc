// The VM structure tables: a fake JVM's tables broken one value at a time (every bound, the
// not-ready states, a missing entry named), the layout cache, and live JVMs of both local JDKs,
// whose tables must match the lists read from their libjvm files (vm_dumps/) and resolve to the
// layout facts known of each.
#include "runtimes/hotspot/vm_structs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "runtimes/process_memory.h"
#include "vm_fake_tables.h"
#include "vm_live_jvm.h"

namespace ember::hotspot {
namespace {

using fake::FakeMemory;
using fake::FakeTables;

absl::StatusOr<HotSpotLayout> Resolve(FakeTables& tables, FakeMemory& memory) {
  return ReadHotSpotLayout(memory, tables.Process());
}

absl::StatusOr<HotSpotLayout> BuildAndResolve(FakeTables& tables) {
  FakeMemory memory;
  tables.Build(memory);
  return Resolve(tables, memory);
}

void Erase(FakeTables& tables, const std::string& type, const std::string& field) {
  auto& s = tables.structs;
  auto it = std::find_if(s.begin(), s.end(), [&](const fake::StructEntry& e) {
    return e.type == type && e.field == field;
  });
  ASSERT_NE(it, s.end()) << type << "::" << field;
  s.erase(it);
}

fake::StructEntry& Entry(FakeTables& tables, const std::string& type, const std::string& field) {
  for (fake::StructEntry& e : tables.structs) {
    if (e.type == type && e.field == field) return e;
  }
  ADD_FAILURE() << type << "::" << field;
  return tables.structs.front();
}

TEST(VmStructsFakeTest, ResolvesAConsistentImage) {
  FakeTables tables;
  absl::StatusOr<HotSpotLayout> layout = BuildAndResolve(tables);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->major, 17u);
  EXPECT_EQ(layout->minor, 0u);
  EXPECT_EQ(layout->security, 15u);
  EXPECT_EQ(layout->build, 6u);
  EXPECT_EQ(layout->unsigned5_excluded, 0);
  // Statics come back as ELF addresses, in table order 8 bytes apart from kStaticsElf.
  EXPECT_EQ(layout->statics.code_cache_heaps, FakeTables::kStaticsElf + 4 * 8);
  EXPECT_EQ(layout->statics.code_cache_low_bound, FakeTables::kStaticsElf + 5 * 8);
  EXPECT_EQ(layout->statics.code_cache_high_bound, FakeTables::kStaticsElf + 6 * 8);
  EXPECT_EQ(layout->statics.interpreter_code, FakeTables::kStaticsElf + 7 * 8);
  EXPECT_EQ(layout->statics.call_stub_return_address, FakeTables::kStaticsElf + 8 * 8);
  EXPECT_EQ(layout->code_heap_log2_segment_size.offset, 168u);
  EXPECT_EQ(layout->code_heap_log2_segment_size.width, 4);
  EXPECT_EQ(layout->code_heap_segmap.offset, 80u);
  EXPECT_EQ(layout->code_heap_segmap.width, 0);  // an embedded VirtualSpace
  EXPECT_EQ(layout->growable_array_len.offset, 0u);
  EXPECT_EQ(layout->growable_array_data.width, 8);
  EXPECT_EQ(layout->heap_block_size, 16u);
  EXPECT_FALSE(layout->code_as_offsets);
  EXPECT_EQ(layout->blob_code_begin.offset, 56u);
  EXPECT_EQ(layout->blob_code_end.offset, 64u);
  EXPECT_EQ(layout->blob_name.width, 8);  // "const char*"
  EXPECT_FALSE(layout->blob_kind.present());
  EXPECT_FALSE(layout->deopt_handler_as_offset);
  EXPECT_EQ(layout->nmethod_deopt_handler.offset, 144u);
  EXPECT_EQ(layout->nmethod_method.offset, 120u);
  EXPECT_EQ(layout->nmethod_compile_id.offset, 300u);
  EXPECT_EQ(layout->nmethod_size, 352u);
  EXPECT_EQ(layout->nmethod_scopes_data_begin.offset, 136u);
  EXPECT_FALSE(layout->nmethod_immutable_data.present());
  EXPECT_EQ(layout->const_method_flags.offset, 36u);
  EXPECT_EQ(layout->const_method_flags.width, 2);
  EXPECT_EQ(layout->const_method_size, 48u);
  EXPECT_EQ(layout->has_linenumber_table_flag, 1u);
  EXPECT_EQ(layout->constant_pool_source_file_name_index.offset, 66u);
  EXPECT_FALSE(layout->instance_klass_source_file_name_index.present());
  EXPECT_EQ(layout->symbol_length.offset, 4u);
  EXPECT_EQ(layout->symbol_length.width, 2);
  EXPECT_EQ(layout->symbol_body.offset, 6u);
  EXPECT_EQ(layout->stub_queue_buffer_limit.offset, 16u);
  EXPECT_EQ(layout->interpreter_frame_sender_sp_offset, -1);
  EXPECT_EQ(layout->interpreter_frame_last_sp_offset, -2);
  EXPECT_EQ(layout->entry_frame_call_wrapper_offset, -6);
}

TEST(VmStructsFakeTest, RawRowsAsWritten) {
  FakeTables tables;
  FakeMemory memory;
  tables.Build(memory);
  absl::StatusOr<VMTables> raw = ReadVMTables(memory, tables.Process());
  ASSERT_TRUE(raw.ok()) << raw.status();
  ASSERT_EQ(raw->structs.size(), tables.structs.size());
  ASSERT_EQ(raw->types.size(), tables.types.size());
  ASSERT_EQ(raw->int_constants.size(), tables.ints.size());
  ASSERT_EQ(raw->long_constants.size(), tables.longs.size());
  for (size_t i = 0; i < raw->structs.size(); ++i) {
    EXPECT_EQ(raw->structs[i].type_name, tables.structs[i].type);
    EXPECT_EQ(raw->structs[i].field_name, tables.structs[i].field);
    EXPECT_EQ(raw->structs[i].type_string, tables.structs[i].type_string);
    EXPECT_EQ(raw->structs[i].is_static, tables.structs[i].is_static);
    EXPECT_EQ(raw->structs[i].offset, tables.structs[i].offset);
    EXPECT_EQ(raw->structs[i].address, tables.structs[i].address);
  }
  EXPECT_EQ(raw->int_constants[1].second, -2);
  EXPECT_EQ(raw->long_constants[0].second, 0x7fffffffu);
  EXPECT_EQ(raw->types[9].type_name, "HeapBlock");
  EXPECT_EQ(raw->types[9].size, 16u);
}

TEST(VmStructsFakeTest, ZeroStrideIsNotReady) {
  for (uint64_t VMStructsSymbols::*stride :
       {&VMStructsSymbols::struct_stride, &VMStructsSymbols::type_stride,
        &VMStructsSymbols::int_stride, &VMStructsSymbols::long_stride}) {
    FakeTables tables;
    FakeMemory memory;
    tables.Build(memory);
    memory.WriteU64(tables.Sym(stride), 0);
    absl::StatusOr<HotSpotLayout> layout = Resolve(tables, memory);
    ASSERT_FALSE(layout.ok());
    EXPECT_TRUE(IsNotReady(layout.status())) << layout.status();
    EXPECT_EQ(OutcomeOf(layout.status()), JvmOutcome::kNotReady);
    EXPECT_TRUE(absl::StrContains(layout.status().message(), "not ready")) << layout.status();
  }
}

TEST(VmStructsFakeTest, NullTableIsNotReady) {
  for (uint64_t VMStructsSymbols::*table :
       {&VMStructsSymbols::structs, &VMStructsSymbols::types, &VMStructsSymbols::int_constants,
        &VMStructsSymbols::long_constants}) {
    FakeTables tables;
    FakeMemory memory;
    tables.Build(memory);
    memory.WriteU64(tables.Sym(table), 0);
    absl::StatusOr<HotSpotLayout> layout = Resolve(tables, memory);
    ASSERT_FALSE(layout.ok());
    EXPECT_TRUE(IsNotReady(layout.status())) << layout.status();
  }
}

TEST(VmStructsFakeTest, HugeStrideIsRefused) {
  for (uint64_t stride : {kMaxEntryStride + 1, uint64_t{1} << 40, ~uint64_t{0}}) {
    FakeTables tables;
    FakeMemory memory;
    tables.Build(memory);
    memory.WriteU64(tables.Sym(&VMStructsSymbols::type_stride), stride);
    absl::StatusOr<HotSpotLayout> layout = Resolve(tables, memory);
    ASSERT_FALSE(layout.ok());
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kDataLoss) << layout.status();
    EXPECT_EQ(OutcomeOf(layout.status()), JvmOutcome::kUnsupported);
    EXPECT_TRUE(absl::StrContains(layout.status().message(), "stride")) << layout.status();
  }
}

TEST(VmStructsFakeTest, StrideBelowOneWordIsRefused) {
  // A stride under 8 leaves no room for the 8-byte members every row is read at.
  for (uint64_t stride : {uint64_t{1}, uint64_t{4}, uint64_t{7}}) {
    FakeTables tables;
    FakeMemory memory;
    tables.Build(memory);
    memory.WriteU64(tables.Sym(&VMStructsSymbols::type_stride), stride);
    absl::StatusOr<VMTables> raw = ReadVMTables(memory, tables.Process());
    ASSERT_FALSE(raw.ok()) << stride;
    EXPECT_EQ(raw.status().code(), absl::StatusCode::kDataLoss) << raw.status();
    EXPECT_TRUE(absl::StrContains(raw.status().message(), "stride")) << raw.status();
  }
}

TEST(VmStructsFakeTest, StringBytesAreBudgeted) {
  FakeTables tables;
  FakeMemory memory;
  tables.Build(memory);
  // A long-constants table whose rows all name one long string: each row's copy counts, so the
  // table is refused well before kMaxEntries rows.
  constexpr uint64_t kLong = FakeTables::kStrings + 0x80000;
  const std::string name(kMaxNameBytes - 1, 'L');
  memory.Write(kLong, name.c_str(), name.size() + 1);
  const size_t rows = kMaxStringBytes / kMaxNameBytes + 1;
  ASSERT_LT(rows, kMaxEntries);
  constexpr uint64_t kRows = 0x40000000;
  memory.Map(kRows, (rows + 1) * 16);
  for (size_t i = 0; i < rows; ++i) memory.WriteU64(kRows + i * 16, kLong);
  memory.WriteU64(tables.Sym(&VMStructsSymbols::long_constants), kRows);
  absl::StatusOr<VMTables> raw = ReadVMTables(memory, tables.Process());
  ASSERT_FALSE(raw.ok());
  EXPECT_EQ(raw.status().code(), absl::StatusCode::kDataLoss) << raw.status();
  EXPECT_TRUE(absl::StrContains(raw.status().message(), "strings exceed")) << raw.status();

  // Half as many rows fit in the budget.
  memory.WriteU64(kRows + (rows / 2) * 16, 0);
  raw = ReadVMTables(memory, tables.Process());
  EXPECT_TRUE(raw.ok()) << raw.status();
}

TEST(VmStructsFakeTest, MemberOffsetOutsideStrideIsRefused) {
  for (uint64_t offset : {uint64_t{41}, uint64_t{48}, ~uint64_t{0}}) {
    FakeTables tables;
    FakeMemory memory;
    tables.Build(memory);
    memory.WriteU64(tables.Sym(&VMStructsSymbols::struct_address), offset);
    absl::StatusOr<HotSpotLayout> layout = Resolve(tables, memory);
    ASSERT_FALSE(layout.ok());
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kDataLoss) << layout.status();
  }
}

TEST(VmStructsFakeTest, MissingTerminatorIsBounded) {
  FakeTables tables;
  FakeMemory memory;
  tables.Build(memory);
  // A long-constants table of kMaxEntries + 1 named rows: the parse stops at the bound.
  constexpr uint64_t kHuge = 0x40000000;
  memory.Map(kHuge, (kMaxEntries + 1) * 16);
  const uint64_t name = memory.ReadU64(tables.longs_at);
  for (size_t i = 0; i <= kMaxEntries; ++i) memory.WriteU64(kHuge + i * 16, name);
  memory.WriteU64(tables.Sym(&VMStructsSymbols::long_constants), kHuge);
  absl::StatusOr<HotSpotLayout> layout = Resolve(tables, memory);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kDataLoss) << layout.status();
  EXPECT_TRUE(absl::StrContains(layout.status().message(), "terminat")) << layout.status();
}

TEST(VmStructsFakeTest, TableRunningIntoUnmappedMemoryFails) {
  FakeTables tables;
  FakeMemory memory;
  tables.Build(memory);
  // The terminator of the last table is gone, and past it memory ends.
  memory.WriteU64(tables.Sym(&VMStructsSymbols::long_constants),
                  0x100000 + FakeTables::kTables - 16);
  memory.WriteU64(0x100000 + FakeTables::kTables - 16, memory.ReadU64(tables.longs_at));
  absl::StatusOr<HotSpotLayout> layout = Resolve(tables, memory);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kFailedPrecondition) << layout.status();
  EXPECT_EQ(OutcomeOf(layout.status()), JvmOutcome::kUnreadableProcess);
}

TEST(VmStructsFakeTest, UnterminatedNameIsRefused) {
  FakeTables tables;
  FakeMemory memory;
  tables.Build(memory);
  constexpr uint64_t kLong = FakeTables::kStrings + 0x80000;
  const std::string as(kMaxNameBytes + 100, 'A');
  memory.Write(kLong, as.data(), as.size());
  memory.WriteU64(tables.structs_at + 5 * FakeTables::kStructStride + 8, kLong);
  absl::StatusOr<HotSpotLayout> layout = Resolve(tables, memory);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kDataLoss) << layout.status();
  EXPECT_TRUE(absl::StrContains(layout.status().message(), "NUL")) << layout.status();

  // One byte shorter than the bound, it is a name.
  memory.Write(kLong + kMaxNameBytes - 1, "", 1);
  absl::StatusOr<VMTables> raw = ReadVMTables(memory, tables.Process());
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->structs[5].field_name, std::string(kMaxNameBytes - 1, 'A'));
}

TEST(VmStructsFakeTest, NameRunningIntoUnmappedMemoryFails) {
  FakeTables tables;
  FakeMemory memory;
  tables.Build(memory);
  const uint64_t end = FakeTables::kStrings + 0x100000;
  memory.Write(end - 3, "abc", 3);
  memory.WriteU64(tables.types_at, end - 3);
  absl::StatusOr<HotSpotLayout> layout = Resolve(tables, memory);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kFailedPrecondition) << layout.status();
}

TEST(VmStructsFakeTest, OffsetPastItsTypeSizeIsRefused) {
  for (uint64_t offset : {uint64_t{208}, uint64_t{205}, uint64_t{1} << 33}) {
    FakeTables tables;
    Entry(tables, "CodeHeap", "_log2_segment_size").offset = offset;
    absl::StatusOr<HotSpotLayout> layout = BuildAndResolve(tables);
    ASSERT_FALSE(layout.ok()) << offset;
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kDataLoss) << layout.status();
    EXPECT_TRUE(absl::StrContains(layout.status().message(), "CodeHeap::_log2_segment_size"))
        << layout.status();
    EXPECT_EQ(OutcomeOf(layout.status()), JvmOutcome::kUnsupported);
  }
  {
    // A field of no scalar width (an embedded VirtualSpace) must still start inside its type.
    FakeTables tables;
    Entry(tables, "CodeHeap", "_segmap").offset = 208;
    absl::StatusOr<HotSpotLayout> layout = BuildAndResolve(tables);
    ASSERT_FALSE(layout.ok());
    EXPECT_TRUE(absl::StrContains(layout.status().message(), "CodeHeap::_segmap"))
        << layout.status();
  }
  FakeTables tables;
  Entry(tables, "CodeHeap", "_log2_segment_size").offset = 204;  // the last int that fits
  EXPECT_TRUE(BuildAndResolve(tables).ok());
}

TEST(VmStructsFakeTest, HugeTypeSizeIsRefused) {
  FakeTables tables;
  for (auto& [name, size] : tables.types) {
    if (name == "CodeHeap") size = kMaxTypeSize + 1;
  }
  absl::StatusOr<HotSpotLayout> layout = BuildAndResolve(tables);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kDataLoss) << layout.status();
}

TEST(VmStructsFakeTest, MissingEntryIsNamed) {
  for (const auto& [type, field] : std::vector<std::pair<std::string, std::string>>{
           {"CodeCache", "_heaps"},
           {"CodeHeap", "_log2_segment_size"},
           {"nmethod", "_compile_id"},
           {"Symbol", "_body"},
           {"Abstract_VM_Version", "_vm_major_version"}}) {
    FakeTables tables;
    Erase(tables, type, field);
    absl::StatusOr<HotSpotLayout> layout = BuildAndResolve(tables);
    ASSERT_FALSE(layout.ok()) << type << "::" << field;
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kUnimplemented) << layout.status();
    EXPECT_EQ(OutcomeOf(layout.status()), JvmOutcome::kUnsupported);
    EXPECT_TRUE(absl::StrContains(layout.status().message(), type + "::" + field))
        << layout.status();
    EXPECT_FALSE(IsNotReady(layout.status()));
  }
  FakeTables tables;
  tables.types.erase(std::find_if(tables.types.begin(), tables.types.end(),
                                  [](const auto& t) { return t.first == "HeapBlock"; }));
  absl::StatusOr<HotSpotLayout> layout = BuildAndResolve(tables);
  ASSERT_FALSE(layout.ok());
  EXPECT_TRUE(absl::StrContains(layout.status().message(), "type HeapBlock")) << layout.status();
}

TEST(VmStructsFakeTest, AlternativesByPresence) {
  FakeTables tables;
  tables.major = 25;
  Erase(tables, "GrowableArrayBase", "_len");
  tables.structs.push_back({"GenericGrowableArray", "_len", "int", false, 4, 0});
  tables.types.push_back({"GenericGrowableArray", 16});
  Erase(tables, "CodeBlob", "_code_begin");
  Erase(tables, "CodeBlob", "_code_end");
  tables.structs.push_back({"CodeBlob", "_code_offset", "int", false, 40, 0});
  tables.structs.push_back({"CodeBlob", "_data_offset", "int", false, 44, 0});
  tables.structs.push_back({"CodeBlob", "_kind", "CodeBlobKind", false, 48, 0});
  tables.types.push_back({"CodeBlobKind", 1});
  tables.ints.push_back({"CodeBlobKind::Nmethod", 1});
  tables.ints.push_back({"CodeBlobKind::Vtable", 4});
  Erase(tables, "CompiledMethod", "_deopt_handler_begin");
  tables.structs.push_back({"nmethod", "_deopt_handler_offset", "int", false, 200, 0});
  Erase(tables, "Symbol", "_length");
  tables.structs.push_back({"Symbol", "_length_and_refcount", "unsigned int", false, 0, 0});
  tables.types.push_back({"unsigned int", 4});
  Erase(tables, "ConstMethod", "_flags");
  tables.structs.push_back({"ConstMethod", "_flags._flags", "u4", false, 36, 0});
  tables.types.push_back({"u4", 4});
  Erase(tables, "ConstantPool", "_source_file_name_index");
  tables.structs.push_back({"InstanceKlass", "_source_file_name_index", "u2", false, 190, 0});
  tables.types.push_back({"InstanceKlass", 400});
  absl::StatusOr<HotSpotLayout> layout = BuildAndResolve(tables);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->growable_array_len.offset, 4u);
  EXPECT_TRUE(layout->code_as_offsets);
  EXPECT_EQ(layout->blob_code_begin.offset, 40u);
  EXPECT_EQ(layout->blob_code_end.offset, 44u);
  EXPECT_EQ(layout->blob_kind.offset, 48u);
  EXPECT_EQ(layout->blob_kind.width, 1);
  EXPECT_EQ(layout->kind_nmethod, 1);
  EXPECT_EQ(layout->kind_vtable, 4);
  EXPECT_TRUE(layout->deopt_handler_as_offset);
  EXPECT_EQ(layout->nmethod_deopt_handler.offset, 200u);
  EXPECT_EQ(layout->symbol_length.offset, 2u);
  EXPECT_EQ(layout->symbol_length.width, 2);
  EXPECT_EQ(layout->const_method_flags.width, 4);
  EXPECT_FALSE(layout->constant_pool_source_file_name_index.present());
  EXPECT_EQ(layout->instance_klass_source_file_name_index.offset, 190u);
  EXPECT_EQ(layout->unsigned5_excluded, 1);
}

TEST(VmStructsFakeTest, Unsigned5ExclusionFromJdk20) {
  for (int32_t major : {11, 17, 19, 20, 21, 25}) {
    FakeTables tables;
    tables.major = major;
    absl::StatusOr<HotSpotLayout> layout = BuildAndResolve(tables);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->unsigned5_excluded, major >= 20 ? 1 : 0) << major;
  }
}

TEST(VmStructsFakeTest, LayoutCacheReadsOncePerBuild) {
  FakeTables tables;
  FakeMemory memory;
  tables.Build(memory);
  LayoutCache cache(2);
  // Not ready: an error, and not kept.
  const uint64_t stride = memory.ReadU64(tables.Sym(&VMStructsSymbols::struct_stride));
  memory.WriteU64(tables.Sym(&VMStructsSymbols::struct_stride), 0);
  absl::StatusOr<std::shared_ptr<const HotSpotLayout>> layout =
      cache.Get(memory, tables.Process("aaaa"));
  ASSERT_FALSE(layout.ok());
  EXPECT_TRUE(IsNotReady(layout.status()));
  EXPECT_EQ(cache.size(), 0u);
  memory.WriteU64(tables.Sym(&VMStructsSymbols::struct_stride), stride);

  layout = cache.Get(memory, tables.Process("aaaa"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_GT(memory.reads(), 100u);
  const size_t reads = memory.reads();
  absl::StatusOr<std::shared_ptr<const HotSpotLayout>> again =
      cache.Get(memory, tables.Process("aaaa"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), layout->get());
  EXPECT_EQ(memory.reads(), reads);  // nothing read for a second JVM of the build

  ASSERT_TRUE(cache.Get(memory, tables.Process("bbbb")).ok());
  EXPECT_GT(memory.reads(), reads);
  ASSERT_TRUE(cache.Get(memory, tables.Process("aaaa")).ok());  // "aaaa" now the most recent
  ASSERT_TRUE(cache.Get(memory, tables.Process("cccc")).ok());  // evicts "bbbb"
  EXPECT_EQ(cache.size(), 2u);
  const size_t before = memory.reads();
  ASSERT_TRUE(cache.Get(memory, tables.Process("aaaa")).ok());
  EXPECT_EQ(memory.reads(), before);
  ASSERT_TRUE(cache.Get(memory, tables.Process("bbbb")).ok());
  EXPECT_GT(memory.reads(), before);

  // No build id: read every time.
  const size_t unkeyed = memory.reads();
  ASSERT_TRUE(cache.Get(memory, tables.Process("")).ok());
  ASSERT_TRUE(cache.Get(memory, tables.Process("")).ok());
  EXPECT_GT(memory.reads(), unkeyed + 200);
}

TEST(VmStructsFakeTest, OnlyTaggedErrorsAreNotReady) {
  // A file's open can fail kUnavailable: untagged, it is no "not ready".
  EXPECT_FALSE(IsNotReady(absl::UnavailableError("resource temporarily unavailable")));
  EXPECT_EQ(OutcomeOf(absl::UnavailableError("x")), JvmOutcome::kUnreadableLibjvm);
  EXPECT_EQ(OutcomeOf(absl::OkStatus()), JvmOutcome::kSupported);
  for (JvmOutcome outcome : {JvmOutcome::kNotReady, JvmOutcome::kUnsupported,
                             JvmOutcome::kUnreadableLibjvm, JvmOutcome::kUnreadableProcess}) {
    EXPECT_EQ(OutcomeOf(WithOutcome(absl::InternalError("x"), outcome)), outcome);
  }
  EXPECT_EQ(JvmOutcomeName(JvmOutcome::kNotReady), "not_ready");
  EXPECT_EQ(JvmOutcomeName(JvmOutcome::kUnreadableProcess), "unreadable_process");
}

// ---- Live JVMs ----

std::vector<std::vector<std::string>> ReadDump(const std::string& name) {
  std::vector<std::vector<std::string>> rows;
  const std::string text =
      live::ReadText(std::string(EMBER_HOTSPOT_TEST_DIR) + "/vm_dumps/" + name);
  EXPECT_FALSE(text.empty()) << name;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    rows.push_back(absl::StrSplit(line, '\t'));
  }
  return rows;
}

struct Expected {
  const char* jdk;
  const char* dump;
  const char* build_id;
  uint32_t major;
  uint32_t heap_block_size;
  bool code_as_offsets;
  uint8_t frame_complete_width;
  uint32_t const_method_size;
  uint8_t unsigned5_excluded;
  uint8_t const_method_flags_width;
};

class VmStructsLiveTest : public ::testing::TestWithParam<Expected> {};

TEST_P(VmStructsLiveTest, TablesMatchTheFileAndResolve) {
  const Expected& want = GetParam();
  live::LiveJvm jvm(want.jdk);
  ASSERT_TRUE(jvm.ok());
  std::optional<JvmProcess> process = jvm.Detect();
  ASSERT_TRUE(process.has_value());
  ASSERT_EQ(process->libjvm->build_id, want.build_id)
      << "this JDK's libjvm is not the one vm_dumps/ lists: list its tables again";
  ProcessMemoryReader reader(jvm.pid());
  absl::StatusOr<VMTables> tables = ReadVMTables(reader, *process);
  ASSERT_TRUE(tables.ok()) << tables.status();

  // Every row as the file lists it: names, type strings and static flags of the structs, sizes
  // of the types, and the int constants (all fixed at build time).
  const auto structs = ReadDump(std::string(want.dump) + ".structs.txt");
  ASSERT_EQ(tables->structs.size(), structs.size());
  size_t nonzero_offsets = 0;
  for (size_t i = 0; i < structs.size(); ++i) {
    const VMStructRow& row = tables->structs[i];
    ASSERT_EQ(structs[i].size(), 4u);
    EXPECT_EQ(row.type_name, structs[i][0]) << i;
    EXPECT_EQ(row.field_name, structs[i][1]) << i;
    EXPECT_EQ(row.type_string, structs[i][2] == "None" ? "" : structs[i][2]) << i;
    EXPECT_EQ(row.is_static, structs[i][3] == "static") << row.type_name << "::" << row.field_name;
    if (row.is_static) {
      // Inside libjvm's image in this process.
      EXPECT_GE(row.address, process->bias) << row.type_name << "::" << row.field_name;
    }
    if (!row.is_static && row.offset != 0) ++nonzero_offsets;
  }
  // Filled at run time: the file has none, the live process most.
  EXPECT_GT(nonzero_offsets, structs.size() / 2);

  const auto types = ReadDump(std::string(want.dump) + ".types.txt");
  ASSERT_EQ(tables->types.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    EXPECT_EQ(tables->types[i].type_name, types[i][0]);
    EXPECT_EQ(tables->types[i].superclass_name, types[i][1] == "None" ? "" : types[i][1]);
    EXPECT_EQ("size=" + std::to_string(tables->types[i].size), types[i][2]) << types[i][0];
  }
  const auto ints = ReadDump(std::string(want.dump) + ".ints.txt");
  ASSERT_EQ(tables->int_constants.size(), ints.size());
  for (size_t i = 0; i < ints.size(); ++i) {
    int32_t value = 0;
    ASSERT_TRUE(absl::SimpleAtoi(ints[i][1], &value)) << ints[i][1];
    EXPECT_EQ(tables->int_constants[i].first, ints[i][0]);
    // Two constants are computed by libjvm's initialisers: the file holds 0 for them.
    if (value == 0 && (ints[i][0] == "Matcher::interpreter_frame_pointer_reg" ||
                       ints[i][0] == "VMRegImpl::stack_slot_size")) {
      EXPECT_NE(tables->int_constants[i].second, 0) << ints[i][0];
      continue;
    }
    EXPECT_EQ(tables->int_constants[i].second, value) << ints[i][0];
  }
  const auto longs = ReadDump(std::string(want.dump) + ".longs.txt");
  ASSERT_EQ(tables->long_constants.size(), longs.size());
  for (size_t i = 0; i < longs.size(); ++i) {
    EXPECT_EQ(tables->long_constants[i].first, longs[i][0]);
  }

  absl::StatusOr<HotSpotLayout> layout = ResolveLayout(*tables, process->bias, reader);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const HotSpotLayout& l = *layout;
  EXPECT_EQ(l.major, want.major);
  EXPECT_EQ(l.minor, 0u);
  EXPECT_GT(l.security, 0u);
  EXPECT_EQ(l.heap_block_size, want.heap_block_size);
  EXPECT_EQ(l.code_as_offsets, want.code_as_offsets);
  EXPECT_EQ(l.blob_frame_complete_offset.width, want.frame_complete_width);
  EXPECT_EQ(l.const_method_size, want.const_method_size);
  EXPECT_EQ(l.unsigned5_excluded, want.unsigned5_excluded);
  EXPECT_EQ(l.const_method_flags.width, want.const_method_flags_width);
  EXPECT_EQ(l.interpreter_frame_sender_sp_offset, -1);
  EXPECT_EQ(l.interpreter_frame_last_sp_offset, -2);
  EXPECT_EQ(l.entry_frame_call_wrapper_offset, -6);
  EXPECT_EQ(l.has_linenumber_table_flag, 1u);
  EXPECT_EQ(l.pc_desc_size, 16u);
  EXPECT_EQ(l.constant_pool_size, 72u);
  EXPECT_EQ(l.deopt_handler_as_offset, want.major >= 25);
  EXPECT_EQ(l.blob_kind.present(), want.major >= 23);
  if (want.major >= 23) {
    EXPECT_EQ(l.kind_nmethod, 1);
    EXPECT_EQ(l.kind_vtable, 4);
    EXPECT_EQ(l.blob_kind.width, 1);
  }
  // Every field a consumer reads, present, scalar where it is read as one.
  for (const Field* f : {&l.growable_array_data,
                         &l.growable_array_len,
                         &l.code_heap_log2_segment_size,
                         &l.virtual_space_low_boundary,
                         &l.virtual_space_high_boundary,
                         &l.virtual_space_low,
                         &l.virtual_space_high,
                         &l.blob_name,
                         &l.blob_size,
                         &l.blob_frame_size,
                         &l.blob_frame_complete_offset,
                         &l.blob_code_begin,
                         &l.blob_code_end,
                         &l.nmethod_method,
                         &l.nmethod_compile_id,
                         &l.nmethod_orig_pc_offset,
                         &l.nmethod_deopt_handler,
                         &l.nmethod_scopes_pcs_offset,
                         &l.pc_desc_pc_offset,
                         &l.pc_desc_scope_decode_offset,
                         &l.method_const_method,
                         &l.const_method_constants,
                         &l.const_method_code_size,
                         &l.const_method_name_index,
                         &l.const_method_signature_index,
                         &l.const_method_flags,
                         &l.constant_pool_pool_holder,
                         &l.constant_pool_source_file_name_index,
                         &l.klass_name,
                         &l.symbol_length,
                         &l.stub_queue_stub_buffer,
                         &l.stub_queue_buffer_limit}) {
    EXPECT_TRUE(f->present()) << "field #" << (f - &l.growable_array_data);
    EXPECT_GT(f->width, 0) << "field at offset " << f->offset;
  }
  // Offsets that follow from the classes' declarations alone (same in 17 and 25): Symbol is
  // {u4 _hash_and_refcount; u2 _length; u1 _body[]}, VirtualSpace starts with its four
  // boundaries, PcDesc with its two ints, GrowableArrayBase with _len, Method (virtual) with
  // _constMethod after the vtable pointer.
  EXPECT_EQ(l.symbol_length.offset, 4u);
  EXPECT_EQ(l.symbol_body.offset, 6u);
  EXPECT_EQ(l.virtual_space_low_boundary.offset, 0u);
  EXPECT_EQ(l.virtual_space_high_boundary.offset, 8u);
  EXPECT_EQ(l.virtual_space_low.offset, 16u);
  EXPECT_EQ(l.virtual_space_high.offset, 24u);
  EXPECT_EQ(l.pc_desc_pc_offset.offset, 0u);
  EXPECT_EQ(l.pc_desc_scope_decode_offset.offset, 4u);
  EXPECT_EQ(l.growable_array_len.offset, 0u);
  EXPECT_EQ(l.growable_array_data.offset, 8u);
  EXPECT_EQ(l.method_const_method.offset, 8u);
  EXPECT_EQ(l.blob_name.width, 8);  // const char*
  EXPECT_EQ(l.nmethod_compile_id.width, 4);
  EXPECT_EQ(l.symbol_length.width, 2);
  EXPECT_EQ(l.code_heap_memory.width, 0);  // an embedded VirtualSpace
  EXPECT_TRUE(l.code_heap_memory.present());
  EXPECT_TRUE(l.code_heap_segmap.present());
  EXPECT_NE(l.code_heap_memory.offset, l.code_heap_segmap.offset);
  EXPECT_TRUE(l.symbol_body.present());
  if (want.major >= 25) {
    for (const Field* f :
         {&l.nmethod_immutable_data, &l.nmethod_immutable_data_size, &l.nmethod_scopes_data_offset,
          &l.blob_mutable_data, &l.blob_mutable_data_size, &l.blob_relocation_size}) {
      EXPECT_TRUE(f->present());
    }
  } else {
    for (const Field* f : {&l.nmethod_metadata_offset, &l.nmethod_scopes_data_begin,
                           &l.nmethod_dependencies_offset}) {
      EXPECT_TRUE(f->present());
    }
  }
  // Statics are ELF addresses inside libjvm's writable segments.
  for (uint64_t address :
       {l.statics.code_cache_heaps, l.statics.code_cache_low_bound, l.statics.code_cache_high_bound,
        l.statics.interpreter_code, l.statics.call_stub_return_address}) {
    bool inside = false;
    for (const LoadSegment& segment : process->libjvm->segments) {
      inside |= segment.writable && address >= segment.vaddr &&
                address < segment.vaddr + segment.mem_size;
    }
    EXPECT_TRUE(inside) << std::hex << address;
  }
  // The VM is up: the code cache's statics hold values in the process.
  uint64_t heaps = 0;
  ASSERT_TRUE(reader.Read(process->ToProcess(l.statics.code_cache_heaps), &heaps, 8));
  EXPECT_NE(heaps, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Jdks, VmStructsLiveTest,
    ::testing::Values(Expected{live::kJdk17, "17", "97da31b249941f25ff26a6126471221bb579d67f", 17,
                               16, false, 4, 48, 0, 2},
                      Expected{live::kJdk25, "25", "cc370ed13824fae0d65fd64357a9bdf1a732eac0", 25,
                               8, true, 2, 56, 1, 4}),
    [](const ::testing::TestParamInfo<Expected>& info) {
      return std::string("Jdk") + info.param.dump;
    });

TEST(VmStructsLiveTest, SecondJvmOfABuildReadsNothing) {
  live::LiveJvm first(live::kJdk17);
  live::LiveJvm second(live::kJdk17);
  ASSERT_TRUE(first.ok() && second.ok());
  std::optional<JvmProcess> a = first.Detect();
  std::optional<JvmProcess> b = second.Detect();
  ASSERT_TRUE(a && b);
  LayoutCache cache;
  ProcessMemoryReader reader_a(first.pid());
  absl::StatusOr<std::shared_ptr<const HotSpotLayout>> la = cache.Get(reader_a, *a);
  ASSERT_TRUE(la.ok()) << la.status();
  // The second process's reader fails every read: the layout must come from the cache.
  FakeMemory nothing;
  absl::StatusOr<std::shared_ptr<const HotSpotLayout>> lb = cache.Get(nothing, *b);
  ASSERT_TRUE(lb.ok()) << lb.status();
  EXPECT_EQ(la->get(), lb->get());
  EXPECT_EQ(nothing.reads(), 0u);
}

}  // namespace
}  // namespace ember::hotspot
