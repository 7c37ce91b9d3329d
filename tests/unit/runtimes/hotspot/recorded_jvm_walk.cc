// The Java walk shared by the recorder and the replay tests, and the fixture's values.
#include "recorded_jvm_walk.h"

#include <algorithm>
#include <memory>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ember::hotspot::testing {
namespace {

constexpr uint64_t VMStructsSymbols::*kSymbolFields[] = {
    &VMStructsSymbols::structs,           &VMStructsSymbols::types,
    &VMStructsSymbols::int_constants,     &VMStructsSymbols::long_constants,
    &VMStructsSymbols::struct_stride,     &VMStructsSymbols::struct_type_name,
    &VMStructsSymbols::struct_field_name, &VMStructsSymbols::struct_type_string,
    &VMStructsSymbols::struct_is_static,  &VMStructsSymbols::struct_offset,
    &VMStructsSymbols::struct_address,    &VMStructsSymbols::type_stride,
    &VMStructsSymbols::type_type_name,    &VMStructsSymbols::type_superclass_name,
    &VMStructsSymbols::type_size,         &VMStructsSymbols::int_stride,
    &VMStructsSymbols::int_name,          &VMStructsSymbols::int_value,
    &VMStructsSymbols::long_stride,       &VMStructsSymbols::long_name,
    &VMStructsSymbols::long_value,
};
constexpr size_t kSymbolCount = sizeof(kSymbolFields) / sizeof(kSymbolFields[0]);
constexpr size_t kMaxBlobName = 64;

const char* NameStatusName(NameStatus status) {
  switch (status) {
    case NameStatus::kOk:
      return "ok";
    case NameStatus::kReadFailed:
      return "read_failed";
    case NameStatus::kImplausible:
      return "implausible";
    case NameStatus::kStale:
      return "stale";
    case NameStatus::kUnsupported:
      return "unsupported";
  }
  return "?";
}

absl::StatusOr<std::vector<uint64_t>> HexWords(const RecordedMemory& memory,
                                               const std::string& name, size_t count) {
  const std::string* text = memory.Get(name);
  if (text == nullptr) return absl::NotFoundError(absl::StrCat("fixture: no value ", name));
  std::vector<uint64_t> words;
  for (absl::string_view part : absl::StrSplit(*text, ' ', absl::SkipEmpty())) {
    uint64_t word = 0;
    if (!absl::SimpleHexAtoi(part, &word)) {
      return absl::InvalidArgumentError(absl::StrCat("fixture: ", name, " has a non-hex word"));
    }
    words.push_back(word);
  }
  if (words.size() != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("fixture: ", name, " has ", words.size(), " words, not ", count));
  }
  return words;
}

std::string HexJoin(const uint64_t* words, size_t count) {
  std::string text;
  for (size_t i = 0; i < count; ++i) absl::StrAppend(&text, i ? " " : "", absl::Hex(words[i]));
  return text;
}

std::string BlobName(const HotSpotLayout& layout, MemoryReader& memory, uint64_t blob) {
  uint64_t address = 0;
  if (!layout.blob_name.present() ||
      !memory.Read(blob + layout.blob_name.offset, &address, sizeof(address)) || address == 0) {
    return "";
  }
  std::string name;
  char piece[16];
  while (name.size() < kMaxBlobName && memory.Read(address + name.size(), piece, sizeof(piece))) {
    const std::string_view text(piece, sizeof(piece));
    const size_t end = text.find('\0');
    name.append(text.substr(0, end));
    if (end != std::string_view::npos) break;
  }
  return name.substr(0, kMaxBlobName);
}

}  // namespace

std::vector<std::string> JavaWalk::Lines() const {
  std::vector<std::string> lines;
  for (const WalkedFrame& frame : frames) {
    lines.insert(lines.end(), frame.lines.begin(), frame.lines.end());
  }
  lines.push_back(absl::StrCat("end ", StepOutcomeName(end)));
  return lines;
}

JavaWalk WalkJava(FrameStepper& stepper, MethodNamer& namer, const HotSpotLayout& layout,
                  MemoryReader& memory, const FrameRegisters& entry, bool leaf,
                  const StackMemory& stack) {
  JavaWalk walk;
  FrameRegisters registers = entry;
  std::vector<JavaFrame> java;
  for (int i = 0; i < kMaxRecordedJavaFrames; ++i) {
    if (!stepper.InCodeCache(registers.value[kRegIp])) {
      walk.end = StepOutcome::kNotInCodeCache;
      return walk;
    }
    JavaStep step;
    stepper.Step(registers, leaf, stack, step);
    if (step.outcome != StepOutcome::kStepped) {
      walk.end = step.outcome;
      return walk;
    }
    WalkedFrame& frame = walk.frames.emplace_back();
    frame.stepped = step.frame;
    frame.registers = registers;
    frame.leaf = leaf;
    const char* kind = JavaFrameKindName(step.frame.kind);
    java.clear();
    switch (step.frame.kind) {
      case JavaFrameKind::kInterpreted: {
        JavaFrame one;
        frame.status = namer.NameInterpreted(memory, step.frame.object, step.frame.position, &one);
        if (frame.status == NameStatus::kOk) java.push_back(one);
        break;
      }
      case JavaFrameKind::kCompiled:
      case JavaFrameKind::kNativeWrapper:
        frame.status = namer.NameCompiled(memory, step.frame.object, step.frame.compile_id,
                                          static_cast<int32_t>(step.frame.position),
                                          leaf ? PcMatch::kAtOrAfter : PcMatch::kExact, &java);
        break;
      case JavaFrameKind::kStub:
      case JavaFrameKind::kVtable:
      case JavaFrameKind::kCallStub: {
        const std::string name = BlobName(layout, memory, step.frame.object);
        frame.lines.push_back(name.empty() ? absl::StrCat(kind, " unnamed")
                                           : absl::StrCat(kind, " [jvm] ", name));
        break;
      }
    }
    if (frame.status != NameStatus::kOk) {
      frame.lines.push_back(absl::StrCat(kind, " unnamed ", NameStatusName(frame.status)));
    } else {
      for (size_t j = 0; j < java.size(); ++j) {
        const JavaFrame& one = java[j];
        // The methods a compiled frame inlined come before its own, the outermost.
        const bool inlined = j + 1 < java.size();
        frame.lines.push_back(absl::StrCat(inlined ? "inlined" : kind, " ", one.method->function,
                                           " ", one.method->source_file, ":", one.line,
                                           " bci=", one.bci));
      }
    }
    if (step.frame.kind == JavaFrameKind::kCallStub) {
      walk.end = StepOutcome::kStepped;
      return walk;
    }
    registers = step.caller;
    leaf = false;
  }
  walk.end = StepOutcome::kBadReturnAddress;  // more frames than any fixture has
  return walk;
}

void StoreSymbols(const VMStructsSymbols& symbols, uint64_t bias, RecordedMemory& memory) {
  uint64_t words[kSymbolCount];
  for (size_t i = 0; i < kSymbolCount; ++i) words[i] = symbols.*kSymbolFields[i];
  memory.Set("libjvm.symbols", HexJoin(words, kSymbolCount));
  memory.Set("libjvm.bias", absl::StrCat(absl::Hex(bias)));
}

absl::StatusOr<JvmProcess> LoadJvmProcess(const RecordedMemory& memory) {
  absl::StatusOr<std::vector<uint64_t>> words = HexWords(memory, "libjvm.symbols", kSymbolCount);
  if (!words.ok()) return words.status();
  absl::StatusOr<std::vector<uint64_t>> bias = HexWords(memory, "libjvm.bias", 1);
  if (!bias.ok()) return bias.status();
  auto libjvm = std::make_shared<LibjvmInfo>();
  libjvm->path = "libjvm.so";
  for (size_t i = 0; i < kSymbolCount; ++i) libjvm->symbols.*kSymbolFields[i] = (*words)[i];
  if (const std::string* build_id = memory.Get("libjvm.build_id")) libjvm->build_id = *build_id;
  return JvmProcess{.libjvm = std::move(libjvm), .bias = (*bias)[0]};
}

void StoreEntry(const FrameRegisters& entry, bool leaf, RecordedMemory& memory) {
  memory.Set("entry.regs", HexJoin(entry.value, kCfiRegisterCount));
  memory.Set("entry.known", absl::StrCat(absl::Hex(entry.known)));
  memory.Set("entry.leaf", leaf ? "1" : "0");
}

absl::Status LoadEntry(const RecordedMemory& memory, FrameRegisters* entry, bool* leaf) {
  absl::StatusOr<std::vector<uint64_t>> regs = HexWords(memory, "entry.regs", kCfiRegisterCount);
  if (!regs.ok()) return regs.status();
  absl::StatusOr<std::vector<uint64_t>> known = HexWords(memory, "entry.known", 1);
  if (!known.ok()) return known.status();
  const std::string* leaf_text = memory.Get("entry.leaf");
  if (leaf_text == nullptr) return absl::NotFoundError("fixture: no value entry.leaf");
  std::copy(regs->begin(), regs->end(), entry->value);
  entry->known = static_cast<uint32_t>((*known)[0]);
  *leaf = *leaf_text == "1";
  return absl::OkStatus();
}

void StoreExpected(const std::vector<std::string>& lines, RecordedMemory& memory) {
  memory.Set("expected.count", absl::StrCat(lines.size()));
  for (size_t i = 0; i < lines.size(); ++i) {
    memory.Set(absl::StrCat("expected.", i), absl::CEscape(lines[i]));
  }
}

absl::StatusOr<std::vector<std::string>> LoadExpected(const RecordedMemory& memory) {
  const std::string* count_text = memory.Get("expected.count");
  size_t count = 0;
  if (count_text == nullptr || !absl::SimpleAtoi(*count_text, &count) || count > 1000) {
    return absl::InvalidArgumentError("fixture: no valid expected.count");
  }
  std::vector<std::string> lines;
  for (size_t i = 0; i < count; ++i) {
    const std::string* text = memory.Get(absl::StrCat("expected.", i));
    std::string line;
    if (text == nullptr || !absl::CUnescape(*text, &line)) {
      return absl::InvalidArgumentError(absl::StrCat("fixture: no valid expected.", i));
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace ember::hotspot::testing
