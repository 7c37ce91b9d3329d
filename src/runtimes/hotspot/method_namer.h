// Names of Java methods read from a HotSpot JVM's memory: a Method* (interpreted frames, and
// each scope of a compiled one) -> class, method, signature, source file and the line of a
// bytecode index; an nmethod and a pc in it -> the methods inlined there, innermost first.
// Cached per process until unused for two generations; every read is bounded, and memory that
// does not hold what it should gives a counted failure, never an unbounded read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/profile.h"
#include "runtimes/hotspot/hotspot_layout.h"
#include "runtimes/hotspot/scopes.h"
#include "runtimes/process_memory.h"

namespace ember::hotspot {

// The bytes of one nmethod's scope tables (metadata, scopes data, PcDescs) together.
inline constexpr uint64_t kMaxScopeTableBytes = 1 << 20;
// The longest line number table read (a method has at most 64 KiB of bytecodes).
inline constexpr uint32_t kMaxLineTableBytes = 64 << 10;
// Entries each cache holds at most; past it, names are made but not kept past the generation.
inline constexpr size_t kMaxCachedMethods = 1 << 16;
inline constexpr size_t kMaxCachedSymbols = 1 << 16;
inline constexpr size_t kMaxCachedNmethods = 1 << 12;
// The scope tables of the cached nmethods together.
inline constexpr size_t kMaxCachedScopeTableBytes = 16 << 20;
// The most of one Symbol read: frames cut names to kMaxNameBytes.
inline constexpr size_t kMaxSymbolBytes = 1024;

struct MethodInfo {
  uint64_t method = 0;        // Method*
  uint64_t const_method = 0;  // its ConstMethod* when named: another one means another method
  // "com.example.Foo"; a hidden class's "+0x<address>" suffix reads "+<hidden>" so that its
  // frames merge across runs.
  std::string class_name;
  std::string method_name;  // "bar"
  std::string signature;    // "(ILjava/lang/String;)V"
  std::string source_file;  // "Foo.java"; empty when the class has none
  // The printable name, "com.example.Foo.bar": overloads share it (as Java stack traces print
  // them); `signature` tells them apart where needed.
  std::string function;
  uint32_t code_size = 0;  // bytes of bytecodes
  // The compressed line number table (empty when the method has none or it could not be read).
  std::vector<uint8_t> line_table;
};

enum class NameStatus : uint8_t {
  kOk,
  kReadFailed,   // memory that should be there could not be read (the process exited, or freed)
  kImplausible,  // read, but not what it should hold (sizes out of range, bad UTF-8, loops)
  kStale,        // an nmethod whose compile id is not the recorded one: freed, another there
  kUnsupported,  // the layout lacks an entry this needs
};

// One Java frame of a compiled or interpreted frame: `method` stays valid until the namer's
// next NextGeneration().
struct JavaFrame {
  const MethodInfo* method = nullptr;
  int32_t bci = -1;   // -1: unknown
  uint32_t line = 0;  // 0: unknown
};

struct MethodNamerStats {
  uint64_t methods_named = 0;    // Method*s named (cache misses)
  uint64_t methods_renamed = 0;  // cached Method*s whose ConstMethod changed (reuse, redefinition)
  uint64_t methods_stale = 0;    // a sample's ConstMethod cookie not the method's now
  uint64_t methods_read_failed = 0;
  uint64_t methods_implausible = 0;  // bad UTF-8, null symbols, sizes out of range
  // Methods named without their source file or lines: those did not read or decode.
  uint64_t source_files_failed = 0;
  uint64_t line_tables_failed = 0;
  uint64_t nmethods_decoded = 0;  // scope tables read (cache misses)
  uint64_t nmethods_stale = 0;    // compile id mismatch
  uint64_t nmethods_read_failed = 0;
  uint64_t nmethods_implausible = 0;  // table bounds out of order or too large
  uint64_t scopes_failed = 0;         // PcDesc not found or a scope chain that did not decode
  // Leaf pcs with no PcDesc of their own: named from the PcDesc their code path reaches, or (the
  // path ended first, or the code did not read) from the next PcDesc in address order.
  uint64_t leaf_paths_followed = 0;
  uint64_t leaf_paths_ended = 0;
  uint64_t not_cached = 0;  // names made while a cache was full
};

class MethodNamer {
 public:
  // `layout` must outlive the namer (one per libjvm file, shared by its processes).
  explicit MethodNamer(const HotSpotLayout& layout) : layout_(layout) {}
  MethodNamer(const MethodNamer&) = delete;
  MethodNamer& operator=(const MethodNamer&) = delete;

  // The names of `method` (a Method*). A cached Method* is checked once per generation: its
  // ConstMethod* read again must be the one it was named with. nullptr on failure (counted, with
  // the reason in `*status` when given). `const_method_cookie`, when the sample recorded one
  // (ConstMethodCookie of the ConstMethod* it saw), must match the method named, else kStale:
  // the method was unloaded or redefined since the sample.
  const MethodInfo* NameMethod(MemoryReader& memory, uint64_t method, NameStatus* status = nullptr,
                               std::optional<uint32_t> const_method_cookie = std::nullopt);

  // The bytecode index of the bytecode pointer `bcp` of an interpreted frame of `method`; nullopt
  // when it does not point into the method's bytecodes.
  std::optional<int32_t> BciFromBcp(const MethodInfo& method, uint64_t bcp) const;
  // The source line of `bci` in `method` (its copied line table); 0 when unknown.
  uint32_t LineOf(const MethodInfo& method, int32_t bci) const;

  // An interpreted frame: its Method* and bytecode pointer (0 when unknown, e.g. a native method),
  // and the cookie of its ConstMethod* when the sample has one (see NameMethod).
  NameStatus NameInterpreted(MemoryReader& memory, uint64_t method, uint64_t bcp, JavaFrame* out,
                             std::optional<uint32_t> const_method_cookie = std::nullopt);

  // The Java frames of compiled code at `pc_offset` bytes past the code start of the nmethod at
  // `nmethod`, innermost (the most deeply inlined) first; `compile_id` is the one recorded with
  // the sample. A return address is looked up exactly; a leaf pc with no PcDesc of its own by the
  // PcDesc its code path reaches first (FollowToPcDesc), else at or after (PcMatch). When the
  // pc has no scopes (or they do not decode, counted in scopes_failed), one frame of the
  // nmethod's own method with no line, and kOk. On failure `out` holds what was named before it.
  NameStatus NameCompiled(MemoryReader& memory, uint64_t nmethod, int32_t compile_id,
                          int32_t pc_offset, PcMatch match, std::vector<JavaFrame>* out);

  // A JNI wrapper (a native method's nmethod): its PcDesc table is empty, so its method is read
  // from the nmethod directly; one frame, line unknown. `compile_id` as for NameCompiled.
  NameStatus NameNativeWrapper(MemoryReader& memory, uint64_t nmethod, int32_t compile_id,
                               std::vector<JavaFrame>* out);

  // Drops entries not used in the last two generations (call after an interval is written).
  void NextGeneration();
  const MethodNamerStats& stats() const { return stats_; }
  // An estimate of the bytes its caches hold (entries, names, line and scope tables); walks them
  // all, so once an interval rather than per sample.
  size_t HeldBytes() const;

 private:
  struct MethodEntry {
    std::unique_ptr<MethodInfo> info;
    uint64_t generation = 0;  // last used
    uint64_t checked = 0;     // generation its ConstMethod* was last compared
  };
  struct SymbolEntry {
    std::string raw;  // the Symbol's bytes, to compare with what its address holds later
    std::string text;
    uint16_t length = 0;
    uint64_t generation = 0;
    uint64_t checked = 0;
  };
  struct NmethodKey {
    uint64_t nmethod = 0;
    int32_t compile_id = 0;
    bool operator==(const NmethodKey&) const = default;
  };
  struct NmethodKeyHash {
    size_t operator()(const NmethodKey& key) const;
  };
  struct ScopeTables {
    uint64_t method = 0;  // nmethod._method
    std::vector<uint64_t> metadata;
    std::vector<uint8_t> scopes_data;
    std::vector<uint8_t> pcs;
    // The code, read when a leaf pc first needs it (FollowToPcDesc); code_begin 0 when the layout
    // does not say where it lies.
    uint64_t code_begin = 0;
    uint64_t code_end = 0;
    bool code_read = false;
    std::vector<uint8_t> code;
    uint64_t generation = 0;
  };

  NameStatus ReadMethod(MemoryReader& memory, uint64_t method, MethodInfo* info);
  NameStatus ReadSymbol(MemoryReader& memory, uint64_t symbol, std::string* out);
  NameStatus ReadPoolSymbol(MemoryReader& memory, uint64_t pool, uint64_t index, std::string* out);
  NameStatus ReadLineTable(MemoryReader& memory, uint64_t start, MethodInfo* info);
  NameStatus ReadScopeTables(MemoryReader& memory, uint64_t nmethod, ScopeTables* tables);
  void ReadCodeRange(MemoryReader& memory, uint64_t nmethod, ScopeTables* tables);
  std::optional<PcDescEntry> LeafPcDesc(MemoryReader& memory, ScopeTables* tables,
                                        const PcDescLayout& layout, int32_t pc_offset);
  void CountMethodFailure(NameStatus status);
  void CountNmethodFailure(NameStatus status);
  static size_t ScopeTableBytes(const ScopeTables& tables);

  const HotSpotLayout& layout_;
  std::unordered_map<uint64_t, MethodEntry> methods_;
  std::unordered_map<uint64_t, SymbolEntry> symbols_;
  std::unordered_map<NmethodKey, ScopeTables, NmethodKeyHash> nmethods_;
  size_t cached_scope_bytes_ = 0;  // ScopeTableBytes of nmethods_
  // Names made while the method cache was full, or replaced after their Method* was reused:
  // frames handed out may point at them until the next generation.
  std::vector<std::unique_ptr<MethodInfo>> retired_;
  uint64_t generation_ = 0;
  MethodNamerStats stats_;
};

// What a sample records of an interpreted frame's ConstMethod* to tell the method it saw from a
// later one at the same Method* (the walk's 32-bit check word).
inline uint32_t ConstMethodCookie(uint64_t const_method) {
  return static_cast<uint32_t>(const_method >> 3);
}

// "com/example/Foo" -> "com.example.Foo", a hidden class's "+0x1234abcd" -> "+<hidden>".
std::string JavaClassName(std::string_view internal_name);
// Modified UTF-8 (a Symbol's bytes) as UTF-8: surrogate pairs joined into one code point, the
// two-byte NUL (C0 80) read as "?"; nullopt for bytes that are neither UTF-8 nor its modified
// form (a zero byte, a bad lead or continuation byte, a lone surrogate).
std::optional<std::string> ModifiedUtf8ToUtf8(std::string_view bytes);

// A profile frame of kind jvm for a Java frame: function, source file and line.
void FillFrame(const JavaFrame& java, Frame* frame);

}  // namespace ember::hotspot
