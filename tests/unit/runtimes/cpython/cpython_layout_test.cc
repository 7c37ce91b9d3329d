// The layout table against the DWARF of real builds, as recorded by
// tests/data/python/dump_offsets.sh under tests/data/python/dwarf/ (3.11: Debian's python3.11
// with python3.11-dbg; the others: pyenv builds, see each file's first line).
#include "runtimes/cpython/cpython_layout.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

namespace ember::python {
namespace {

// expression -> value; fields the build does not have are absent.
std::map<std::string, int64_t> LoadDwarfRecord(const std::string& version) {
  std::ifstream in(std::string(EMBER_TEST_DATA_DIR) + "/python/dwarf/" + version + ".txt");
  EXPECT_TRUE(in.good()) << version;
  std::map<std::string, int64_t> values;
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.rfind(" =");
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    std::string value = line.substr(eq + 2);
    if (value.empty() || !(std::isdigit(static_cast<unsigned char>(value[0])) || value[0] == '-')) {
      continue;  // "There is no member named ..."
    }
    values[line.substr(0, eq)] = std::stoll(value);
  }
  return values;
}

std::string Member(const std::string& type, const std::string& field) {
  return "&((" + type + "*)0)->" + field;
}

int64_t Offset(const std::map<std::string, int64_t>& dwarf, const std::string& key) {
  auto it = dwarf.find(key);
  return it == dwarf.end() ? int64_t{kNoOffset} : it->second;
}

class LayoutDwarfTest : public testing::TestWithParam<std::string> {};

TEST_P(LayoutDwarfTest, EveryOffsetMatchesTheRecordedDwarf) {
  std::string version = GetParam();
  int minor = std::stoi(version.substr(2));
  const CPythonLayout* l = FindLayout(3, minor);
  ASSERT_NE(l, nullptr);
  EXPECT_TRUE(l->verified);
  auto d = LoadDwarfRecord(version);
  ASSERT_GT(d.size(), 20u);
  const std::string rt = "struct pyruntimestate", is = "struct _is", ts = "struct _ts";
  EXPECT_EQ(l->runtime_interpreters_head, Offset(d, Member(rt, "interpreters.head")));
  EXPECT_EQ(l->runtime_tstate_current, Offset(d, Member(rt, "gilstate.tstate_current")));
  EXPECT_EQ(l->interp_threads_head,
            Offset(d, Member(is, minor <= 10 ? "tstate_head" : "threads.head")));
  EXPECT_EQ(l->tstate_next, Offset(d, Member(ts, "next")));
  EXPECT_EQ(l->tstate_thread_id, Offset(d, Member(ts, "thread_id")));
  EXPECT_EQ(l->tstate_native_thread_id, Offset(d, Member(ts, "native_thread_id")));
  const char* frame_field = minor <= 10 ? "frame" : minor <= 12 ? "cframe" : "current_frame";
  EXPECT_EQ(l->tstate_frame, Offset(d, Member(ts, frame_field)));
  EXPECT_EQ(l->cframe_current_frame, Offset(d, Member("struct _PyCFrame", "current_frame")));
  if (minor <= 10) {
    const std::string f = "struct _frame";
    EXPECT_FALSE(l->interpreter_frames);
    EXPECT_EQ(l->frame_previous, Offset(d, Member(f, "f_back")));
    EXPECT_EQ(l->frame_code, Offset(d, Member(f, "f_code")));
    EXPECT_EQ(l->frame_last_instruction, Offset(d, Member(f, "f_lasti")));
    EXPECT_EQ(l->code_linetable,
              Offset(d, Member("PyCodeObject", minor <= 9 ? "co_lnotab" : "co_linetable")));
    EXPECT_EQ(l->frame_owner, kNoOffset);
  } else {
    const std::string f = "struct _PyInterpreterFrame";
    EXPECT_TRUE(l->interpreter_frames);
    EXPECT_EQ(l->frame_previous, Offset(d, Member(f, "previous")));
    EXPECT_EQ(l->frame_code, Offset(d, Member(f, minor <= 12 ? "f_code" : "f_executable")));
    EXPECT_EQ(l->frame_last_instruction,
              Offset(d, Member(f, minor <= 12 ? "prev_instr" : "instr_ptr")));
    EXPECT_EQ(l->frame_owner, Offset(d, Member(f, "owner")));
    EXPECT_EQ(l->frame_is_entry, Offset(d, Member(f, "is_entry")));
    EXPECT_EQ(l->code_linetable, Offset(d, Member("PyCodeObject", "co_linetable")));
    EXPECT_EQ(l->owner_cstack, d.count("FRAME_OWNED_BY_CSTACK") ? d["FRAME_OWNED_BY_CSTACK"] : -1);
  }
  const std::string co = "PyCodeObject";
  EXPECT_EQ(l->code_filename, Offset(d, Member(co, "co_filename")));
  EXPECT_EQ(l->code_name, Offset(d, Member(co, "co_name")));
  EXPECT_EQ(l->code_qualname, Offset(d, Member(co, "co_qualname")));
  EXPECT_EQ(l->code_firstlineno, Offset(d, Member(co, "co_firstlineno")));
  EXPECT_EQ(l->code_adaptive, Offset(d, Member(co, "co_code_adaptive")));
  EXPECT_EQ(l->object_type, Offset(d, Member("PyObject", "ob_type")));
  EXPECT_EQ(l->var_size, Offset(d, Member("PyVarObject", "ob_size")));
  EXPECT_EQ(l->bytes_data, Offset(d, Member("PyBytesObject", "ob_sval")));
  EXPECT_EQ(l->unicode_length, Offset(d, Member("PyASCIIObject", "length")));
  EXPECT_EQ(l->unicode_state, Offset(d, Member("PyASCIIObject", "state")));
  EXPECT_EQ(l->ascii_data, Offset(d, "sizeof(PyASCIIObject)"));
  EXPECT_EQ(l->compact_data, Offset(d, "sizeof(PyCompactUnicodeObject)"));
}

INSTANTIATE_TEST_SUITE_P(Versions, LayoutDwarfTest,
                         testing::Values("3.8", "3.9", "3.10", "3.11", "3.12", "3.13"),
                         [](const auto& info) {
                           std::string name = "Python" + info.param;
                           name.erase(name.find('.'), 1);
                           return name;
                         });

TEST(LayoutTest, CoversExactly38To313) {
  EXPECT_EQ(FindLayout(3, 7), nullptr);
  EXPECT_EQ(FindLayout(3, 14), nullptr);
  EXPECT_EQ(FindLayout(2, 7), nullptr);
  ASSERT_EQ(AllLayouts().size(), 6u);
  for (int minor = 8; minor <= 13; ++minor) {
    const CPythonLayout* layout = FindLayout(3, minor);
    ASSERT_NE(layout, nullptr) << minor;
    EXPECT_EQ(layout->minor, minor);
    EXPECT_EQ(layout->interpreter_frames, minor >= 11);
    EXPECT_EQ(layout->line_table, minor <= 9    ? LineTableFormat::kLnotab
                                  : minor == 10 ? LineTableFormat::kLineTable310
                                                : LineTableFormat::kLocationTable);
  }
}

}  // namespace
}  // namespace ember::python
