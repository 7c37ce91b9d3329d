// Process memory recorded once and read back in tests: a RecordingMemoryReader keeps every byte
// a reader read (a live JVM, say), and a RecordedMemory file holds those bytes, coalesced into
// ranges, with named values beside them (registers, symbol addresses, expected frames). A test
// replays the file through RecordedMemory, which fails every read that was not recorded, so the
// code under test sees exactly the memory it saw live.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtimes/process_memory.h"

namespace ember::testing {

class RecordedMemory : public MemoryReader {
 public:
  // Reads succeed only inside one recorded range.
  bool Read(uint64_t address, void* out, size_t size) override;

  // Adds `bytes` at `address`, merged with the ranges it touches.
  void Add(uint64_t address, const void* bytes, size_t size);
  // Named values, in the order set (a name set again keeps its place).
  void Set(const std::string& name, const std::string& value);
  const std::string* Get(const std::string& name) const;

  size_t range_count() const { return ranges_.size(); }
  size_t byte_count() const;
  // Flips the byte at `address` (inside a range): for tests of what a changed byte does.
  bool Overwrite(uint64_t address, const void* bytes, size_t size);

  // The text form: "value NAME TEXT" lines, then "range HEXADDRESS HEXBYTES" lines.
  std::string Serialize() const;
  static absl::StatusOr<RecordedMemory> Parse(const std::string& text);
  static absl::StatusOr<RecordedMemory> Load(const std::string& path);
  absl::Status Save(const std::string& path) const;

 private:
  std::map<uint64_t, std::string> ranges_;  // start -> bytes, not touching one another
  std::vector<std::pair<std::string, std::string>> values_;
};

// Reads through `inner` and records into `recorded` every read that succeeded.
class RecordingMemoryReader : public MemoryReader {
 public:
  RecordingMemoryReader(MemoryReader& inner, RecordedMemory& recorded)
      : inner_(inner), recorded_(recorded) {}
  bool Read(uint64_t address, void* out, size_t size) override {
    if (!inner_.Read(address, out, size)) return false;
    recorded_.Add(address, out, size);
    return true;
  }

 private:
  MemoryReader& inner_;
  RecordedMemory& recorded_;
};

}  // namespace ember::testing
