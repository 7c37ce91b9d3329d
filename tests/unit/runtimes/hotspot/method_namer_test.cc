// The method namer over a synthetic JVM memory image laid out with JDK 17's and JDK 25's type
// sizes and forms: names, source files, lines, inlined scopes, caches and hostile memory.
#include "runtimes/hotspot/method_namer.h"

#include <gtest/gtest.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "namer_live_layout.h"
#include "namer_memory_image.h"
#include "runtimes/process_memory.h"
#include "support/nm_symbols.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace ember::hotspot {
namespace {

using testing::EncodePcDescs;
using testing::JavaClass;
using testing::Jdk;
using testing::JvmImage;
using testing::MethodSpec;
using testing::ScopesWriter;

class MethodNamerTest : public ::testing::TestWithParam<Jdk> {
 protected:
  MethodNamerTest() : image_(GetParam()) {
    foo_ = image_.AddClass("com/example/Foo", "Foo.java");
    bar_ = image_.AddMethod(foo_, {.name = "bar",
                                   .signature = "(ILjava/lang/String;)V",
                                   .code_size = 400,
                                   .lines = {{0, 20}, {6, 21}, {40, 25}, {300, 90}}});
  }
  JvmImage image_;
  JavaClass foo_;
  uint64_t bar_ = 0;
};

TEST_P(MethodNamerTest, NamesAnInterpretedFrame) {
  MethodNamer namer(image_.layout());
  JavaFrame frame;
  ASSERT_EQ(namer.NameInterpreted(image_.memory(), bar_, image_.CodeStartOf(bar_) + 45, &frame),
            NameStatus::kOk);
  ASSERT_NE(frame.method, nullptr);
  EXPECT_EQ(frame.method->class_name, "com.example.Foo");
  EXPECT_EQ(frame.method->method_name, "bar");
  EXPECT_EQ(frame.method->signature, "(ILjava/lang/String;)V");
  EXPECT_EQ(frame.method->function, "com.example.Foo.bar");
  EXPECT_EQ(frame.method->source_file, "Foo.java");
  EXPECT_EQ(frame.bci, 45);
  EXPECT_EQ(frame.line, 25u);
  // The escaped entry (bci step of 260).
  ASSERT_EQ(namer.NameInterpreted(image_.memory(), bar_, image_.CodeStartOf(bar_) + 399, &frame),
            NameStatus::kOk);
  EXPECT_EQ(frame.line, 90u);

  Frame profile_frame;
  FillFrame(frame, &profile_frame);
  EXPECT_EQ(profile_frame.kind, FrameKind::kJvm);
  EXPECT_EQ(profile_frame.function, "com.example.Foo.bar");
  EXPECT_EQ(profile_frame.source_file, "Foo.java");
  EXPECT_EQ(profile_frame.line, 90u);

  // A bcp outside the bytecodes (a native method's 0, or past the end): no bci, no line.
  for (uint64_t bcp : {uint64_t{0}, image_.CodeStartOf(bar_) + 400, image_.CodeStartOf(bar_) - 1}) {
    ASSERT_EQ(namer.NameInterpreted(image_.memory(), bar_, bcp, &frame), NameStatus::kOk);
    EXPECT_EQ(frame.bci, -1);
    EXPECT_EQ(frame.line, 0u);
  }
  EXPECT_EQ(namer.stats().methods_named, 1u);
}

TEST_P(MethodNamerTest, KeepsOnlyTheLineTableBytes) {
  MethodNamer namer(image_.layout());
  const MethodInfo* info = namer.NameMethod(image_.memory(), bar_);
  ASSERT_NE(info, nullptr);
  // Four entries, one escaped (1 + 2 * up to 5 bytes), and the terminator; not the page after.
  EXPECT_GE(info->line_table.size(), 5u);
  EXPECT_LE(info->line_table.size(), 14u);
  EXPECT_EQ(info->line_table.capacity(), info->line_table.size());
  EXPECT_EQ(namer.LineOf(*info, 300), 90u);
}

TEST_P(MethodNamerTest, LongSymbolsAreReadInPart) {
  // A 3000-byte name is read to kMaxSymbolBytes; one whose cut falls inside a two-byte
  // character, or between the halves of a surrogate pair, loses that character.
  const std::string cut_two_byte = std::string(kMaxSymbolBytes - 1, 'a') + "\xC3\xA9tail";
  const std::string cut_pair =
      std::string(kMaxSymbolBytes - 4, 'b') + "\xED\xA0\xBD\xED\xB8\x80tail";
  struct Case {
    std::string name;
    std::string expected;
  };
  for (const Case& c : {Case{std::string(3000, 'x'), std::string(kMaxSymbolBytes, 'x')},
                        Case{cut_two_byte, std::string(kMaxSymbolBytes - 1, 'a')},
                        Case{cut_pair, std::string(kMaxSymbolBytes - 4, 'b')}}) {
    const uint64_t method = image_.AddMethod(foo_, {.name = c.name, .signature = "()V"});
    MethodNamer namer(image_.layout());
    NameStatus status = NameStatus::kOk;
    const MethodInfo* info = namer.NameMethod(image_.memory(), method, &status);
    ASSERT_NE(info, nullptr) << static_cast<int>(status);
    EXPECT_EQ(info->method_name, c.expected);
  }
}

TEST_P(MethodNamerTest, HiddenClassesNoSourceNoLines) {
  JavaClass lambda = image_.AddClass("com/example/Foo$$Lambda+0x0000000801001234", "");
  const uint64_t run = image_.AddMethod(lambda, {.name = "run", .signature = "()V"});
  MethodNamer namer(image_.layout());
  JavaFrame frame;
  ASSERT_EQ(namer.NameInterpreted(image_.memory(), run, image_.CodeStartOf(run) + 3, &frame),
            NameStatus::kOk);
  EXPECT_EQ(frame.method->function, "com.example.Foo$$Lambda+<hidden>.run");
  EXPECT_EQ(frame.method->source_file, "");
  EXPECT_EQ(frame.bci, 3);
  EXPECT_EQ(frame.line, 0u);
  EXPECT_EQ(JavaClassName("a/b/C+0xzz"), "a.b.C+0xzz");
}

TEST_P(MethodNamerTest, LeafPcFollowsItsCodePathToAPcDesc) {
  const uint8_t x = image_.layout().unsigned5_excluded;
  const uint64_t leaf = image_.AddMethod(
      foo_, {.name = "leaf", .signature = "()V", .code_size = 10, .lines = {{0, 60}, {2, 61}}});
  ScopesWriter scopes(x);
  const int32_t in_leaf = scopes.Add(scopes.Add(0, 1, 9), 2, 2);
  const int32_t call_in_bar = scopes.Add(0, 1, 6);
  // Code of nops: the loop's poll at 40 (leaf inlined into bar), another call site at 80, and the
  // loop body after the poll closing with a jump back to it ("jmp 40" at 60).
  std::vector<uint8_t> code(128, 0x90);
  code[60] = 0xEB;
  code[61] = static_cast<uint8_t>(40 - 62);
  const std::vector<uint8_t> pcs = EncodePcDescs({{40, in_leaf}, {80, call_in_bar}});
  const uint64_t nmethod = image_.AddNmethod(bar_, 77, {bar_, leaf}, scopes.bytes(), pcs, code);

  MethodNamer namer(image_.layout());
  std::vector<JavaFrame> frames;
  ASSERT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 50, PcMatch::kAtOrAfter, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].method->function, "com.example.Foo.leaf");
  EXPECT_EQ(frames[0].line, 61u);
  EXPECT_EQ(namer.stats().leaf_paths_followed, 1u);
  // Past the jump, straight on to the call site.
  ASSERT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 62, PcMatch::kAtOrAfter, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].method->function, "com.example.Foo.bar");
  EXPECT_EQ(namer.stats().leaf_paths_followed, 2u);
  // Past the code's end nothing decodes: the next PcDesc in address order (the end sentinel).
  ASSERT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 200, PcMatch::kAtOrAfter, &frames),
            NameStatus::kOk);
  EXPECT_EQ(namer.stats().leaf_paths_ended, 1u);
  // Return addresses stay exact: one with no PcDesc of its own follows no path, and is the
  // nmethod's own method with no line.
  const uint64_t followed = namer.stats().leaf_paths_followed;
  EXPECT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 50, PcMatch::kExact, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].line, 0u);
  EXPECT_EQ(namer.stats().leaf_paths_followed, followed);
  EXPECT_EQ(namer.stats().nmethods_decoded, 1u);
}

TEST_P(MethodNamerTest, InlinedScopesInnermostFirst) {
  const uint8_t x = image_.layout().unsigned5_excluded;
  const uint64_t helper = image_.AddMethod(
      foo_, {.name = "helper", .signature = "()I", .code_size = 30, .lines = {{0, 50}, {7, 52}}});
  const uint64_t leaf = image_.AddMethod(
      foo_, {.name = "leaf", .signature = "(J)J", .code_size = 10, .lines = {{0, 60}, {2, 61}}});
  // metadata[0] = bar (index 1), [1] = helper, [2] = leaf.
  ScopesWriter scopes(x);
  const int32_t outer = scopes.Add(0, 1, 40);
  const int32_t middle = scopes.Add(outer, 2, 7);
  const int32_t inner = scopes.Add(middle, 3, 2);
  const int32_t call_in_bar = scopes.Add(0, 1, 6);
  const std::vector<uint8_t> pcs = EncodePcDescs({{40, inner}, {80, call_in_bar}});
  const uint64_t nmethod = image_.AddNmethod(bar_, 77, {bar_, helper, leaf}, scopes.bytes(), pcs);

  MethodNamer namer(image_.layout());
  std::vector<JavaFrame> frames;
  ASSERT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 40, PcMatch::kExact, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].method->function, "com.example.Foo.leaf");
  EXPECT_EQ(frames[0].bci, 2);
  EXPECT_EQ(frames[0].line, 61u);
  EXPECT_EQ(frames[1].method->function, "com.example.Foo.helper");
  EXPECT_EQ(frames[1].line, 52u);
  EXPECT_EQ(frames[2].method->function, "com.example.Foo.bar");
  EXPECT_EQ(frames[2].line, 25u);

  // The leaf's pc before the PcDesc: the next one at or after it.
  ASSERT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 33, PcMatch::kAtOrAfter, &frames),
            NameStatus::kOk);
  EXPECT_EQ(frames.size(), 3u);
  ASSERT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 41, PcMatch::kAtOrAfter, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].line, 21u);
  // Past the last PcDesc: the nmethod's own method, line unknown.
  ASSERT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 500, PcMatch::kAtOrAfter, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].method->function, "com.example.Foo.bar");
  EXPECT_EQ(frames[0].line, 0u);
  // A return address with no PcDesc of its own: named by the nmethod's method, counted.
  EXPECT_EQ(namer.NameCompiled(image_.memory(), nmethod, 77, 41, PcMatch::kExact, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].method->function, "com.example.Foo.bar");
  EXPECT_EQ(namer.stats().scopes_failed, 1u);
  EXPECT_EQ(namer.stats().nmethods_decoded, 1u);  // the tables were read once

  // Another compile id: freed, and another nmethod at its address.
  EXPECT_EQ(namer.NameCompiled(image_.memory(), nmethod, 78, 40, PcMatch::kExact, &frames),
            NameStatus::kStale);
  EXPECT_TRUE(frames.empty());
  EXPECT_EQ(namer.stats().nmethods_stale, 1u);
}

TEST_P(MethodNamerTest, CachedUntilTheConstMethodChanges) {
  MethodNamer namer(image_.layout());
  const MethodInfo* first = namer.NameMethod(image_.memory(), bar_);
  ASSERT_NE(first, nullptr);
  const uint64_t reads = image_.memory().reads();
  EXPECT_EQ(namer.NameMethod(image_.memory(), bar_), first);
  EXPECT_EQ(image_.memory().reads(), reads);  // checked once per generation only
  namer.NextGeneration();
  EXPECT_EQ(namer.NameMethod(image_.memory(), bar_), first);
  EXPECT_EQ(image_.memory().reads(), reads + 1);  // the ConstMethod* again

  // The class was unloaded and another method's ConstMethod lies behind the same Method*.
  JavaClass other = image_.AddClass("org/other/Baz", "Baz.java");
  const uint64_t qux = image_.AddMethod(other, {.name = "qux", .signature = "()V"});
  image_.memory().Put<uint64_t>(bar_ + image_.layout().method_const_method.offset,
                                image_.ConstMethodOf(qux));
  namer.NextGeneration();
  const MethodInfo* renamed = namer.NameMethod(image_.memory(), bar_);
  ASSERT_NE(renamed, nullptr);
  EXPECT_EQ(renamed->function, "org.other.Baz.qux");
  EXPECT_EQ(namer.stats().methods_renamed, 1u);
  EXPECT_EQ(namer.stats().methods_named, 2u);

  // Unused for two generations: dropped, and read again when seen.
  namer.NextGeneration();
  namer.NextGeneration();
  ASSERT_NE(namer.NameMethod(image_.memory(), bar_), nullptr);
  EXPECT_EQ(namer.stats().methods_named, 3u);
}

// The estimate behind ember_hotspot_cache_bytes: it grows by what each named method holds (its
// names and line table), and falls back once the entries go unused for two generations.
TEST_P(MethodNamerTest, HeldBytesFollowTheCaches) {
  MethodNamer namer(image_.layout());
  const size_t empty = namer.HeldBytes();
  ASSERT_NE(namer.NameMethod(image_.memory(), bar_), nullptr);
  const size_t one = namer.HeldBytes();
  // Its MethodInfo, five names of 3 to 32 bytes, a line table and the symbols read for them.
  EXPECT_GE(one, empty + sizeof(MethodInfo) + std::string("com.example.Foo.bar").size());
  const uint64_t qux = image_.AddMethod(foo_, {.name = std::string(300, 'q'), .signature = "()V"});
  ASSERT_NE(namer.NameMethod(image_.memory(), qux), nullptr);
  // Its name twice in the symbol cache (raw and decoded), and in its MethodInfo twice (the name
  // and the printable name).
  EXPECT_GE(namer.HeldBytes(), one + 4 * 300);
  namer.NextGeneration();
  namer.NextGeneration();
  namer.NextGeneration();
  EXPECT_LT(namer.HeldBytes(), one);
}

TEST_P(MethodNamerTest, SampledConstMethodCookie) {
  MethodNamer namer(image_.layout());
  const uint32_t cookie = ConstMethodCookie(image_.ConstMethodOf(bar_));
  JavaFrame frame;
  const uint64_t bcp = image_.CodeStartOf(bar_) + 6;
  ASSERT_EQ(namer.NameInterpreted(image_.memory(), bar_, bcp, &frame, cookie), NameStatus::kOk);
  EXPECT_EQ(frame.line, 21u);
  // Another cookie than the method there now (cached, or named afresh): the sample saw a method
  // since unloaded.
  EXPECT_EQ(namer.NameInterpreted(image_.memory(), bar_, bcp, &frame, cookie + 1),
            NameStatus::kStale);
  MethodNamer fresh(image_.layout());
  EXPECT_EQ(fresh.NameInterpreted(image_.memory(), bar_, bcp, &frame, cookie + 1),
            NameStatus::kStale);
  EXPECT_EQ(fresh.stats().methods_stale, 1u);
  // Redefined: a new ConstMethod behind the same Method*, and a sample that saw it, named at once
  // in the same generation.
  const uint64_t qux = image_.AddMethod(foo_, {.name = "qux", .signature = "()V"});
  image_.memory().Put<uint64_t>(bar_ + image_.layout().method_const_method.offset,
                                image_.ConstMethodOf(qux));
  const MethodInfo* renamed = namer.NameMethod(image_.memory(), bar_, nullptr,
                                               ConstMethodCookie(image_.ConstMethodOf(qux)));
  ASSERT_NE(renamed, nullptr);
  EXPECT_EQ(renamed->function, "com.example.Foo.qux");
  EXPECT_EQ(namer.stats().methods_renamed, 1u);
  EXPECT_EQ(namer.stats().methods_stale, 1u);
}

TEST_P(MethodNamerTest, ReusedSymbolMemoryIsReadAgainNextGeneration) {
  MethodNamer namer(image_.layout());
  ASSERT_NE(namer.NameMethod(image_.memory(), bar_), nullptr);
  // The class's name Symbol freed and another of the same length made at its address.
  uint64_t symbol = 0;
  image_.memory().Read(foo_.klass + image_.layout().klass_name.offset, &symbol, sizeof(symbol));
  image_.memory().Write(symbol + image_.layout().symbol_body.offset, "com/example/Goo", 15);
  const uint64_t other = image_.AddMethod(foo_, {.name = "other", .signature = "()V"});
  // Within the generation the cached text stands; in the next the bytes are compared.
  EXPECT_EQ(namer.NameMethod(image_.memory(), other)->function, "com.example.Foo.other");
  namer.NextGeneration();
  const uint64_t third = image_.AddMethod(foo_, {.name = "third", .signature = "()V"});
  EXPECT_EQ(namer.NameMethod(image_.memory(), third)->function, "com.example.Goo.third");
}

TEST_P(MethodNamerTest, ModifiedUtf8) {
  // A supplementary character as a surrogate pair of three bytes each, and the two-byte NUL.
  JavaClass odd = image_.AddClass("p/\xed\xa0\xbd\xed\xb8\x80", "");
  const uint64_t method = image_.AddMethod(odd, {.name = "a\xc0\x80z", .signature = "()V"});
  MethodNamer namer(image_.layout());
  const MethodInfo* info = namer.NameMethod(image_.memory(), method);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->function, "p.\xf0\x9f\x98\x80.a?z");
  EXPECT_EQ(ModifiedUtf8ToUtf8("\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");
  for (std::string_view bad :
       {std::string_view("a\0b", 3), std::string_view("\xff"), std::string_view("\xc3"),
        std::string_view("\xed\xa0\xbd"), std::string_view("\xed\xb8\x80"),
        std::string_view("\xf0\x9f\x98\x80"), std::string_view("\xc1\x81")}) {
    EXPECT_FALSE(ModifiedUtf8ToUtf8(bad).has_value()) << bad;
  }
}

TEST_P(MethodNamerTest, HostileMethodsAreCountedFailures) {
  const HotSpotLayout& layout = image_.layout();
  MethodNamer namer(layout);
  NameStatus status;
  // Pointers that are no pointers, or point at nothing.
  EXPECT_EQ(namer.NameMethod(image_.memory(), 0, &status), nullptr);
  EXPECT_EQ(status, NameStatus::kImplausible);
  EXPECT_EQ(namer.NameMethod(image_.memory(), ~uint64_t{0} - 4, &status), nullptr);
  EXPECT_EQ(status, NameStatus::kImplausible);
  EXPECT_EQ(namer.NameMethod(image_.memory(), 0x1000, &status), nullptr);
  EXPECT_EQ(status, NameStatus::kReadFailed);
  EXPECT_EQ(namer.stats().methods_implausible, 2u);
  EXPECT_EQ(namer.stats().methods_read_failed, 1u);

  // A method name of bytes that are not (modified) UTF-8.
  JavaClass bad = image_.AddClass("com/example/Bad", "Bad.java");
  const uint64_t garbled = image_.AddMethod(bad, {.name = "x\xff\xfe", .signature = "()V"});
  EXPECT_EQ(namer.NameMethod(image_.memory(), garbled, &status), nullptr);
  EXPECT_EQ(status, NameStatus::kImplausible);

  // A Symbol whose length runs past what it holds: read only to kMaxSymbolBytes, which hold no
  // name (the bytes after it are not UTF-8), or fail where memory ends.
  JavaClass huge = image_.AddClass("com/example/Huge", "");
  const uint64_t long_name = image_.AddSymbol("short");
  image_.memory().Put<uint16_t>(long_name + layout.symbol_length.offset, 0xFFFF);
  const uint64_t method = image_.AddMethod(huge, {.name = "m", .signature = "()V"});
  image_.memory().Put<uint16_t>(
      image_.ConstMethodOf(method) + layout.const_method_name_index.offset,
      image_.AddPoolSymbol(huge, long_name));
  EXPECT_EQ(namer.NameMethod(image_.memory(), method, &status), nullptr);
  EXPECT_TRUE(status == NameStatus::kImplausible || status == NameStatus::kReadFailed)
      << static_cast<int>(status);

  // No pool holder.
  JavaClass orphan = image_.AddClass("com/example/Orphan", "");
  const uint64_t orphaned = image_.AddMethod(orphan, {.name = "o", .signature = "()V"});
  image_.memory().Put<uint64_t>(orphan.pool + layout.constant_pool_pool_holder.offset, 0);
  EXPECT_EQ(namer.NameMethod(image_.memory(), orphaned, &status), nullptr);
  EXPECT_EQ(status, NameStatus::kImplausible);
  EXPECT_EQ(namer.stats().methods_named, 0u);
  EXPECT_LE(image_.memory().largest_read(), 0xFFFFu);
}

TEST_P(MethodNamerTest, BadSourceOrLinesStillName) {
  const HotSpotLayout& layout = image_.layout();
  // A line table that never ends (no terminator before its memory does).
  JavaClass loose = image_.AddClass("com/example/Loose", "Loose.java");
  const uint64_t method = image_.AddMethod(
      loose, {.name = "spin", .signature = "()V", .code_size = 8, .lines = {{0, 3}, {4, 4}}});
  const uint64_t table = image_.CodeStartOf(method) + 8;
  const std::vector<uint8_t> no_end((table | 0xFFF) + 1 - table, 0x09);
  image_.memory().Write(table, no_end.data(), no_end.size());
  // The source file's symbol is not UTF-8.
  image_.memory().Put<uint16_t>(loose.pool + layout.constant_pool_source_file_name_index.offset,
                                image_.AddPoolSymbol(loose, image_.AddSymbol("\x80.java")));
  MethodNamer namer(layout);
  JavaFrame frame;
  ASSERT_EQ(namer.NameInterpreted(image_.memory(), method, image_.CodeStartOf(method) + 5, &frame),
            NameStatus::kOk);
  EXPECT_EQ(frame.method->function, "com.example.Loose.spin");
  EXPECT_EQ(frame.method->source_file, "");
  EXPECT_EQ(frame.bci, 5);
  EXPECT_EQ(frame.line, 0u);
  EXPECT_EQ(namer.stats().line_tables_failed, 1u);
  EXPECT_EQ(namer.stats().source_files_failed, 1u);
}

TEST_P(MethodNamerTest, NativeWrapperNamedByItsMethod) {
  // A JNI wrapper's nmethod has no PcDescs: its method is the nmethod's.
  const uint64_t wrapper = image_.AddNmethod(bar_, 90, {}, {}, {});
  MethodNamer namer(image_.layout());
  std::vector<JavaFrame> frames;
  ASSERT_EQ(namer.NameNativeWrapper(image_.memory(), wrapper, 90, &frames), NameStatus::kOk);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].method->function, "com.example.Foo.bar");
  EXPECT_EQ(frames[0].line, 0u);
  // As compiled code too: no PcDesc, so the fallback frame, named and counted.
  ASSERT_EQ(namer.NameCompiled(image_.memory(), wrapper, 90, 12, PcMatch::kExact, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].method->function, "com.example.Foo.bar");
  EXPECT_EQ(namer.stats().scopes_failed, 1u);
  // Another compile id at its address: stale.
  EXPECT_EQ(namer.NameNativeWrapper(image_.memory(), wrapper, 91, &frames), NameStatus::kStale);
  EXPECT_TRUE(frames.empty());
  EXPECT_EQ(namer.stats().nmethods_stale, 1u);
}

TEST_P(MethodNamerTest, ScopeTableCacheHasAByteBudget) {
  // Nmethods of ~1 MiB of scopes data each: the cache stops taking them at its byte budget.
  const std::vector<uint8_t> big(kMaxScopeTableBytes - 4096, 0);
  const std::vector<uint8_t> pcs = EncodePcDescs({{10, 0}});
  MethodNamer namer(image_.layout());
  std::vector<JavaFrame> frames;
  const size_t count = kMaxCachedScopeTableBytes / big.size() + 2;
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = static_cast<int32_t>(100 + i);
    const uint64_t nmethod = image_.AddNmethod(bar_, id, {bar_}, big, pcs);
    ASSERT_EQ(namer.NameCompiled(image_.memory(), nmethod, id, 10, PcMatch::kExact, &frames),
              NameStatus::kOk);
  }
  EXPECT_EQ(namer.stats().nmethods_decoded, count);
  EXPECT_GE(namer.stats().not_cached, 1u);
  EXPECT_LE(namer.stats().not_cached, 3u);
}

TEST_P(MethodNamerTest, HostileNmethods) {
  const HotSpotLayout& layout = image_.layout();
  const uint8_t x = layout.unsigned5_excluded;
  ScopesWriter scopes(x);
  const int32_t first = scopes.Add(0, 1, 6);
  // A scope naming metadata index 9 of 1, and one whose sender is itself.
  const int32_t out_of_range = scopes.Add(first, 9, 6);
  const int32_t self = static_cast<int32_t>(scopes.bytes().size());
  scopes.AddRaw(static_cast<uint32_t>(self), 1, 1);
  const std::vector<uint8_t> pcs = EncodePcDescs({{10, out_of_range}, {20, self}});
  const uint64_t nmethod = image_.AddNmethod(bar_, 5, {bar_}, scopes.bytes(), pcs);
  MethodNamer namer(layout);
  std::vector<JavaFrame> frames;
  EXPECT_EQ(namer.NameCompiled(image_.memory(), nmethod, 5, 10, PcMatch::kExact, &frames),
            NameStatus::kImplausible);
  EXPECT_TRUE(frames.empty());
  // The loop stops after one scope: the chain did not decode, so the nmethod's own method.
  EXPECT_EQ(namer.NameCompiled(image_.memory(), nmethod, 5, 20, PcMatch::kExact, &frames),
            NameStatus::kOk);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].method->function, "com.example.Foo.bar");
  EXPECT_EQ(namer.stats().scopes_failed, 2u);

  // Table bounds out of order, or over 1 MiB: refused before any table is read.
  const uint64_t broken = image_.AddNmethod(bar_, 6, {bar_}, scopes.bytes(), pcs);
  if (GetParam() == Jdk::k17) {
    image_.memory().Put<int32_t>(broken + layout.nmethod_dependencies_offset.offset, 1 << 30);
  } else {
    image_.memory().Put<int32_t>(broken + layout.nmethod_immutable_data_size.offset, 1 << 30);
  }
  EXPECT_EQ(namer.NameCompiled(image_.memory(), broken, 6, 10, PcMatch::kExact, &frames),
            NameStatus::kImplausible);
  const uint64_t reversed = image_.AddNmethod(bar_, 7, {bar_}, scopes.bytes(), pcs);
  image_.memory().Put<int32_t>(reversed + layout.nmethod_scopes_pcs_offset.offset, -64);
  EXPECT_EQ(namer.NameCompiled(image_.memory(), reversed, 7, 10, PcMatch::kExact, &frames),
            NameStatus::kImplausible);
  EXPECT_EQ(namer.stats().nmethods_implausible, 2u);
  EXPECT_LE(image_.memory().largest_read(), kMaxScopeTableBytes);
  // Gone: the nmethod's memory unmapped.
  const uint64_t gone = image_.AddNmethod(bar_, 8, {bar_}, scopes.bytes(), pcs);
  image_.memory().Unmap(gone);
  EXPECT_EQ(namer.NameCompiled(image_.memory(), gone, 8, 10, PcMatch::kExact, &frames),
            NameStatus::kReadFailed);
  EXPECT_EQ(namer.stats().nmethods_read_failed, 1u);
}

// A Java program that spins in one interpreted method; the lines of its loop are 5 to 7.
constexpr std::string_view kSpinSource = R"(public class NamerSpin {
  static volatile long sink;
  static long spin(long n) {
    long acc = 0;
    for (long i = 0; i < n; i++) {
      acc += i * 31 + (acc >>> 3);
    }
    return acc;
  }
  public static void main(String[] args) {
    System.out.println("ready");
    System.out.flush();
    while (true) sink += spin(1000000);
  }
}
)";

struct SampledFrame {
  uint64_t method = 0;  // Method*
  std::string function;
  std::string source_file;
  int32_t bci = -1;
  uint32_t line = 0;
};

// Stops thread `tid` (PTRACE_SEIZE + PTRACE_INTERRUPT) and, when its pc is in the interpreter,
// names the Method* in its frame's slot (fp - 3 words) and the bcp in r13, as the walk does for
// a leaf interpreted frame.
std::optional<SampledFrame> SampleThread(pid_t pid, pid_t tid, const testing::LiveJvm& jvm,
                                         MethodNamer& namer) {
  if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) return std::nullopt;
  std::optional<SampledFrame> sampled;
  int status = 0;
  user_regs_struct regs{};
  if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) == 0 &&
      waitpid(tid, &status, __WALL) == tid && ptrace(PTRACE_GETREGS, tid, nullptr, &regs) == 0 &&
      regs.rip >= jvm.interpreter_low && regs.rip < jvm.interpreter_high) {
    ProcessMemoryReader memory(pid);
    uint64_t method = 0;
    JavaFrame frame;
    if (memory.Read(regs.rbp - 24, &method, sizeof(method)) &&
        namer.NameInterpreted(memory, method, regs.r13, &frame) == NameStatus::kOk) {
      sampled = SampledFrame{method, frame.method->function, frame.method->source_file, frame.bci,
                             frame.line};
    }
  }
  ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  return sampled;
}

struct LiveJdk {
  const char* name;
  const char* home;
  const char* package;
  uint32_t major;
};

void PrintTo(const LiveJdk& jdk, std::ostream* out) { *out << jdk.name; }

class MethodNamerLiveTest : public ::testing::TestWithParam<LiveJdk> {};

TEST_P(MethodNamerLiveTest, NamesTheSpinningMethodOfAnInterpretedJvm) {
  const std::string java_home = GetParam().home;
  ASSERT_TRUE(std::filesystem::exists(java_home + "/bin/javac"))
      << java_home << "/bin/javac is missing: install " << GetParam().package;
  ember::testing::TempDir dir("namer-jvm");
  ASSERT_FALSE(dir.path().empty());
  ember::testing::WriteFile(dir.path() + "/NamerSpin.java", kSpinSource);
  ember::testing::CommandOutput(java_home + "/bin/javac -g -d " + dir.path() + " " + dir.path() +
                                "/NamerSpin.java");
  ember::testing::Subprocess java({java_home + "/bin/java", "-Xint", "-XX:+UseSerialGC", "-Xmx64m",
                                   "-cp", dir.path(), "NamerSpin"});
  ASSERT_TRUE(java.WaitForOutput("ready", std::chrono::seconds(30))) << java.output();

  testing::LiveJvm jvm;
  std::string error;
  ASSERT_TRUE(testing::ReadLiveJvm(java.pid(), &jvm, &error)) << error;
  ASSERT_EQ(jvm.layout.major, GetParam().major);
  ASSERT_LT(jvm.interpreter_low, jvm.interpreter_high);
  MethodNamer namer(jvm.layout);

  std::optional<SampledFrame> found;
  for (int attempt = 0; attempt < 300 && !found; ++attempt) {
    for (const auto& task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(java.pid()) + "/task")) {
      const pid_t tid = std::stoi(task.path().filename().string());
      std::optional<SampledFrame> sampled = SampleThread(java.pid(), tid, jvm, namer);
      if (sampled && sampled->function == "NamerSpin.spin") {
        found = sampled;
        break;
      }
    }
    if (!found) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(found.has_value()) << "no interpreted sample in NamerSpin.spin";
  EXPECT_EQ(found->source_file, "NamerSpin.java");
  EXPECT_GE(found->bci, 0);
  EXPECT_GE(found->line, 4u) << "bci " << found->bci;
  EXPECT_LE(found->line, 8u) << "bci " << found->bci;
}

// A hot method with a small one inlined into it, and in that one a call that is never inlined
// (so the inlined scope has PcDescs of its own); `drive` is kept interpreted, spinning long
// enough in its own loop for a sample to find a Method* of the class.
constexpr std::string_view kHotSource = R"(public class NamerHot {
  static volatile long sink;
  static long rare(long i) { return i * 7; }
  static long mix(long a, long i) {
    if ((i & 0xFFFF) == 0) a ^= rare(i);
    return a + i * 31 + (a >>> 3);
  }
  static long hot(long n) {
    long acc = 0;
    for (long i = 0; i < n; i++) {
      acc = mix(acc, i);
    }
    return acc;
  }
  static void drive() {
    while (true) {
      for (int k = 0; k < 20000; k++) sink += k;
      sink += hot(20000);
    }
  }
  public static void main(String[] args) {
    System.out.println("ready");
    System.out.flush();
    drive();
  }
}
)";

uint64_t ReadWord(MemoryReader& memory, uint64_t address) {
  uint64_t value = 0;
  memory.Read(address, &value, sizeof(value));
  return value;
}

TEST_P(MethodNamerLiveTest, NamesTheInlinedScopesOfACompiledMethod) {
  const std::string java_home = GetParam().home;
  ASSERT_TRUE(std::filesystem::exists(java_home + "/bin/javac"))
      << java_home << "/bin/javac is missing: install " << GetParam().package;
  ember::testing::TempDir dir("namer-jvm");
  ASSERT_FALSE(dir.path().empty());
  ember::testing::WriteFile(dir.path() + "/NamerHot.java", kHotSource);
  ember::testing::CommandOutput(java_home + "/bin/javac -g -d " + dir.path() + " " + dir.path() +
                                "/NamerHot.java");
  ember::testing::Subprocess java(
      {java_home + "/bin/java", "-XX:+UseSerialGC", "-Xmx64m", "-XX:CompileCommand=quiet",
       "-XX:CompileCommand=exclude,NamerHot::drive", "-XX:CompileCommand=dontinline,NamerHot::rare",
       "-cp", dir.path(), "NamerHot"});
  ASSERT_TRUE(java.WaitForOutput("ready", std::chrono::seconds(30))) << java.output();
  testing::LiveJvm jvm;
  std::string error;
  ASSERT_TRUE(testing::ReadLiveJvm(java.pid(), &jvm, &error)) << error;
  const HotSpotLayout& layout = jvm.layout;
  MethodNamer namer(layout);
  ProcessMemoryReader memory(java.pid());

  // A Method* of the class from an interpreted sample, then `hot` among its class's methods.
  uint64_t any_method = 0;
  for (int attempt = 0; attempt < 500 && any_method == 0; ++attempt) {
    for (const auto& task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(java.pid()) + "/task")) {
      std::optional<SampledFrame> sampled =
          SampleThread(java.pid(), std::stoi(task.path().filename().string()), jvm, namer);
      if (sampled && sampled->function.starts_with("NamerHot.")) {
        any_method = sampled->method;
        break;
      }
    }
    if (any_method == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(any_method, 0u) << "no interpreted sample of NamerHot";
  const uint64_t pool =
      ReadWord(memory, ReadWord(memory, any_method + layout.method_const_method.offset) +
                           layout.const_method_constants.offset);
  const uint64_t klass = ReadWord(memory, pool + layout.constant_pool_pool_holder.offset);
  const uint64_t methods = ReadWord(memory, klass + jvm.instance_klass_methods.offset);
  int32_t count = 0;
  ASSERT_TRUE(memory.Read(methods, &count, sizeof(count)));
  ASSERT_GT(count, 0);
  ASSERT_LT(count, 100);
  uint64_t hot = 0;
  for (int32_t i = 0; i < count; ++i) {
    const uint64_t method = ReadWord(memory, methods + jvm.method_array_data + 8 * i);
    const MethodInfo* info = namer.NameMethod(memory, method);
    if (info != nullptr && info->function == "NamerHot.hot") hot = method;
  }
  ASSERT_NE(hot, 0u);

  // Its nmethod once compiled (C1 first, then C2: whichever is there), and every pc of its code
  // that has a PcDesc named.
  bool inlined = false;
  std::string seen;
  for (int attempt = 0; attempt < 200 && !inlined; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t nmethod = ReadWord(memory, hot + jvm.method_code.offset);
    if (nmethod == 0) continue;
    int32_t compile_id = 0;
    uint64_t code_begin = 0, code_end = 0;
    ASSERT_TRUE(memory.Read(nmethod + layout.nmethod_compile_id.offset, &compile_id, 4));
    ASSERT_TRUE(memory.Read(nmethod + layout.blob_code_begin.offset, &code_begin,
                            layout.blob_code_begin.width));
    ASSERT_TRUE(
        memory.Read(nmethod + layout.blob_code_end.offset, &code_end, layout.blob_code_end.width));
    if (layout.code_as_offsets) {
      code_begin = static_cast<uint32_t>(code_begin) + nmethod;
      code_end = static_cast<uint32_t>(code_end) + nmethod;
    }
    ASSERT_LT(code_begin, code_end);
    ASSERT_LT(code_end - code_begin, 1u << 20);
    int named = 0;
    std::vector<JavaFrame> frames;
    for (int32_t pc = 0; pc < static_cast<int32_t>(code_end - code_begin); ++pc) {
      const NameStatus status =
          namer.NameCompiled(memory, nmethod, compile_id, pc, PcMatch::kExact, &frames);
      if (status == NameStatus::kStale) break;  // recompiled meanwhile: try the next one
      if (status != NameStatus::kOk) continue;
      ++named;
      ASSERT_FALSE(frames.empty());
      EXPECT_EQ(frames.back().method->function, "NamerHot.hot");
      for (const JavaFrame& frame : frames) {
        EXPECT_EQ(frame.method->source_file, "NamerHot.java");
        EXPECT_TRUE(frame.line == 0 || (frame.line >= 3 && frame.line <= 14)) << frame.line;
      }
      if (frames.size() >= 2 && frames.front().method->function == "NamerHot.mix" &&
          frames.front().line == 5) {
        inlined = true;
      }
      seen = "";
      for (const JavaFrame& frame : frames) {
        seen += frame.method->function + ":" + std::to_string(frame.line) + " ";
      }
    }
    if (named == 0) continue;
  }
  EXPECT_TRUE(inlined) << "no PcDesc of NamerHot.mix inlined in NamerHot.hot; last: " << seen;
  EXPECT_EQ(namer.stats().nmethods_implausible, 0u);
}

// Debian's JDK 17 (UNSIGNED5 with no excluded byte, ConstMethod::_flags a u2) and Temurin's 25
// (one excluded byte, ConstMethod::_flags._flags a u4), where this machine has them.
INSTANTIATE_TEST_SUITE_P(
    Jdks, MethodNamerLiveTest,
    ::testing::Values(LiveJdk{"Jdk17", EMBER_JDK17_HOME, "openjdk-17-jdk-headless", 17},
                      LiveJdk{"Jdk25", EMBER_JDK25_HOME, "Temurin 25 (temurin-25-jdk)", 25}),
    [](const ::testing::TestParamInfo<LiveJdk>& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(Jdks, MethodNamerTest, ::testing::Values(Jdk::k17, Jdk::k25),
                         [](const ::testing::TestParamInfo<Jdk>& info) {
                           return info.param == Jdk::k17 ? std::string("Jdk17")
                                                         : std::string("Jdk25");
                         });

}  // namespace
}  // namespace ember::hotspot
