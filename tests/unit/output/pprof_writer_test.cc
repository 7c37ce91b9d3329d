// Round-trips a hand-built interval through WritePprofFile, then checks the file with our own
// protobuf parser and with Google's pprof, the tool users will actually point at it.
#include "output/pprof_writer.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/gunzip.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"
#include "support/test_frames.h"
#include "support/test_samples.h"

namespace ember {
namespace {

using ::ember::testing::AddSamples;

namespace pb = perftools::profiles;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kPeriodNs = 10'000'000;  // 100 Hz

// Samples of two processes over the shared test frames.
struct Fixture : ember::testing::TestFrames {
  IntervalProfile profile;

  Fixture() {
    profile.start_unix_ns = 1'700'000'000'000'000'000;
    profile.duration_ns = 10'000'000'000;
    profile.period_ns = kPeriodNs;
    AddSamples(profile,
               {
                   {100, "app", "worker", {&work, &app_main}, 5},
                   {100, "app", "main", {&ext4, &syscall, &libc_write, &work_copy, &app_main}, 3},
                   {101, "app", "worker", {&work_later, &app_main}, 1},
                   {200, "tool", "tool", {&unnamed, &tool_main}, 4},
                   {200, "tool", "tool", {&syscall, &libc_write, &tool_main}, 2},
                   {200, "tool", "idle", {&tool_main}, 0},  // dropped: no samples
               });
  }
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

class PprofWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("ember_pprof_test.pb.gz");
    ASSERT_TRUE(WritePprofFile(f_.profile, path_).ok());
    const std::optional<std::string> bytes = testing::Gunzip(ReadFile(path_));
    ASSERT_TRUE(bytes.has_value()) << path_ << " is not one complete gzip member";
    ASSERT_TRUE(p_.ParseFromString(*bytes));
  }

  const std::string& Str(int64_t index) const {
    EXPECT_GE(index, 0);
    EXPECT_LT(index, p_.string_table_size());
    return p_.string_table(static_cast<int>(index));
  }

  // The tables are written with id == position + 1; the test still looks ids up by value.
  template <typename T>
  static const T& ById(const google::protobuf::RepeatedPtrField<T>& table, uint64_t id) {
    for (const T& entry : table) {
      if (entry.id() == id) return entry;
    }
    ADD_FAILURE() << "no entry with id " << id;
    return table.Get(0);
  }

  std::map<std::string, std::string> StrLabels(const pb::Sample& s) const {
    std::map<std::string, std::string> labels;
    for (const pb::Label& l : s.label()) {
      if (l.str() != 0) labels[Str(l.key())] = Str(l.str());
    }
    return labels;
  }

  int64_t PidLabel(const pb::Sample& s) const {
    for (const pb::Label& l : s.label()) {
      if (Str(l.key()) == "pid") return l.num();
    }
    return -1;
  }

  std::vector<std::string> FunctionNames(const pb::Sample& s) const {
    std::vector<std::string> names;
    for (uint64_t id : s.location_id()) {
      const pb::Location& loc = ById(p_.location(), id);
      EXPECT_EQ(loc.line_size(), 1);
      names.push_back(Str(ById(p_.function(), loc.line(0).function_id()).name()));
    }
    return names;
  }

  Fixture f_;
  std::string path_;
  pb::Profile p_;
};

TEST_F(PprofWriterTest, HeaderFields) {
  ASSERT_GT(p_.string_table_size(), 0);
  EXPECT_EQ(p_.string_table(0), "");
  ASSERT_EQ(p_.sample_type_size(), 2);
  EXPECT_EQ(Str(p_.sample_type(0).type()), "samples");
  EXPECT_EQ(Str(p_.sample_type(0).unit()), "count");
  EXPECT_EQ(Str(p_.sample_type(1).type()), "cpu");
  EXPECT_EQ(Str(p_.sample_type(1).unit()), "nanoseconds");
  EXPECT_EQ(Str(p_.period_type().type()), "cpu");
  EXPECT_EQ(Str(p_.period_type().unit()), "nanoseconds");
  EXPECT_EQ(p_.period(), kPeriodNs);
  EXPECT_EQ(p_.time_nanos(), f_.profile.start_unix_ns);
  EXPECT_EQ(p_.duration_nanos(), f_.profile.duration_ns);
  EXPECT_EQ(Str(p_.default_sample_type()), "cpu");
}

TEST_F(PprofWriterTest, SamplesResolveToOriginalFramesInOrder) {
  ASSERT_EQ(p_.sample_size(), 5) << "the zero-count sample must be dropped";
  EXPECT_THAT(FunctionNames(p_.sample(0)), ElementsAre("Work(int)", "main"));
  EXPECT_THAT(FunctionNames(p_.sample(1)),
              ElementsAre("ext4_file_write_iter", "do_syscall_64", "write", "Work(int)", "main"));
  EXPECT_THAT(FunctionNames(p_.sample(2)), ElementsAre("Work(int)", "main"));
  EXPECT_THAT(FunctionNames(p_.sample(3)), ElementsAre("libfoo.so+0x1a2b", "main"));
  EXPECT_THAT(FunctionNames(p_.sample(4)), ElementsAre("do_syscall_64", "write", "main"));

  // Each location keeps its frame's address, mapping, file and line.
  for (int i = 0; i < p_.sample_size(); ++i) {
    const StackSample& in = f_.profile.samples[i];
    const pb::Sample& out = p_.sample(i);
    ASSERT_EQ(out.location_id_size(), static_cast<int>(in.frames.size()));
    for (size_t k = 0; k < in.frames.size(); ++k) {
      const Frame& frame = *in.frames[k];
      const pb::Location& loc = ById(p_.location(), out.location_id(static_cast<int>(k)));
      SCOPED_TRACE(frame.function);
      EXPECT_EQ(loc.address(), frame.address);
      const pb::Mapping& m = ById(p_.mapping(), loc.mapping_id());
      EXPECT_EQ(Str(m.filename()), frame.module);
      EXPECT_EQ(m.build_id() == 0 ? "" : Str(m.build_id()), frame.build_id);
      EXPECT_EQ(loc.line(0).line(), frame.line);
      const pb::Function& fn = ById(p_.function(), loc.line(0).function_id());
      EXPECT_EQ(fn.filename() == 0 ? "" : Str(fn.filename()), frame.source_file);
    }
  }
}

TEST_F(PprofWriterTest, ValuesAndLabels) {
  const std::vector<std::tuple<int64_t, int64_t, std::string, std::string>> want = {
      {5, 100, "app", "worker"}, {3, 100, "app", "main"},  {1, 101, "app", "worker"},
      {4, 200, "tool", "tool"},  {2, 200, "tool", "tool"},
  };
  ASSERT_EQ(p_.sample_size(), static_cast<int>(want.size()));
  for (int i = 0; i < p_.sample_size(); ++i) {
    const auto& [count, pid, process, thread] = want[i];
    const pb::Sample& s = p_.sample(i);
    EXPECT_THAT(s.value(), ElementsAre(count, count * kPeriodNs));
    EXPECT_EQ(PidLabel(s), pid);
    EXPECT_EQ(StrLabels(s),
              (std::map<std::string, std::string>{{"process", process}, {"thread", thread}}));
  }
}

TEST(PprofWriterLabelsTest, ProcessLabelsGoOnEveryOneOfItsSamples) {
  Frame leaf{.function = "work", .address = 0x10, .module = "/app"};
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  AddSamples(profile, {{.pid = 7, .process = "app", .thread = "a", .frames = {&leaf}, .count = 2},
                       {.pid = 8, .process = "host", .thread = "b", .frames = {&leaf}, .count = 1},
                       {.pid = 7, .process = "app", .thread = "c", .frames = {&leaf}, .count = 3}});
  profile.process_metadata[7] = {.container_id = "3f2a9c",
                                 .attributes = {{"k8s.pod.name", "web-1"}}};
  profile.process_metadata[9] = {.container_id = "not-sampled"};
  const pb::Profile p = BuildPprof(profile);
  ASSERT_EQ(p.sample_size(), 3);
  std::vector<std::map<std::string, std::string>> labels;
  for (const pb::Sample& s : p.sample()) {
    std::map<std::string, std::string> named;
    for (const pb::Label& l : s.label()) {
      if (l.str() != 0) named[p.string_table(l.key())] = p.string_table(l.str());
    }
    labels.push_back(named);
  }
  EXPECT_EQ(labels[0], (std::map<std::string, std::string>{{"process", "app"},
                                                           {"thread", "a"},
                                                           {"container.id", "3f2a9c"},
                                                           {"k8s.pod.name", "web-1"}}));
  EXPECT_EQ(labels[1], (std::map<std::string, std::string>{{"process", "host"}, {"thread", "b"}}));
  EXPECT_EQ(labels[2].at("container.id"), "3f2a9c");
  EXPECT_EQ(labels[2].at("thread"), "c");
}

// The labels of each sample by key, string labels only; a key twice fails the test.
std::vector<std::map<std::string, std::string>> SampleStrLabels(const pb::Profile& p) {
  std::vector<std::map<std::string, std::string>> all;
  for (const pb::Sample& s : p.sample()) {
    std::map<std::string, std::string> named;
    for (const pb::Label& l : s.label()) {
      if (l.str() == 0) continue;
      const bool inserted = named.emplace(p.string_table(l.key()), p.string_table(l.str())).second;
      EXPECT_TRUE(inserted) << "label " << p.string_table(l.key()) << " twice";
    }
    all.push_back(named);
  }
  return all;
}

// pprof has no link field: the trace and span go in labels, as Pyroscope turns OTLP links into
// labels; two requests' samples on one stack stay two samples.
TEST(PprofWriterContextTest, TraceContextBecomesLabels) {
  Frame leaf{.function = "work", .address = 0x10, .module = "/app"};
  const TraceLink checkout =
      testing::LinkOf("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
  const TraceLink search = testing::LinkOf("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
  TraceLink no_span = checkout;
  no_span.span_id = {};
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  AddSamples(
      profile,
      {{.pid = 7,
        .process = "app",
        .thread = "a",
        .frames = {&leaf},
        .count = 2,
        .link = checkout,
        .attributes = {{"http.route", "/checkout"}, {"request.kind", "buy"}}},
       {.pid = 7,
        .process = "app",
        .thread = "a",
        .frames = {&leaf},
        .count = 3,
        .link = search,
        .attributes = {{"http.route", "/search"}}},
       // Attributes without a trace, a trace without a span.
       {.pid = 7,
        .process = "app",
        .thread = "a",
        .frames = {&leaf},
        .count = 1,
        .attributes = {{"http.route", "/idle"}, {"empty", ""}}},
       {.pid = 7, .process = "app", .thread = "a", .frames = {&leaf}, .count = 1, .link = no_span},
       // An attribute may not pass for a label Ember sets.
       {.pid = 7,
        .process = "app",
        .thread = "a",
        .frames = {&leaf},
        .count = 1,
        .attributes = {{"trace_id", "forged"}, {"thread", "forged"}}},
       {.pid = 7, .process = "app", .thread = "a", .frames = {&leaf}, .count = 4}});
  const pb::Profile p = BuildPprof(profile);
  ASSERT_EQ(p.sample_size(), 6);
  const std::vector<std::map<std::string, std::string>> labels = SampleStrLabels(p);
  using Labels = std::map<std::string, std::string>;
  EXPECT_EQ(labels[0], (Labels{{"process", "app"},
                               {"thread", "a"},
                               {"trace_id", "0af7651916cd43dd8448eb211c80319c"},
                               {"span_id", "b7ad6b7169203331"},
                               {"http.route", "/checkout"},
                               {"request.kind", "buy"}}));
  EXPECT_EQ(labels[1], (Labels{{"process", "app"},
                               {"thread", "a"},
                               {"trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"},
                               {"span_id", "00f067aa0ba902b7"},
                               {"http.route", "/search"}}));
  EXPECT_EQ(labels[2], (Labels{{"process", "app"}, {"thread", "a"}, {"http.route", "/idle"}}));
  EXPECT_EQ(labels[3], (Labels{{"process", "app"},
                               {"thread", "a"},
                               {"trace_id", "0af7651916cd43dd8448eb211c80319c"}}));
  EXPECT_EQ(labels[4], (Labels{{"process", "app"}, {"thread", "a"}}));
  EXPECT_EQ(labels[5], (Labels{{"process", "app"}, {"thread", "a"}}));
  EXPECT_EQ(p.sample(0).value(0), 2);
  EXPECT_EQ(p.sample(1).value(0), 3);
}

// What a process published about itself (its OpenTelemetry process context) labels its samples,
// replacing what the agent derived for the same key, except what the agent measures.
TEST(PprofWriterContextTest, PublishedAttributesWinOverDerivedOnes) {
  Frame leaf{.function = "work", .address = 0x10, .module = "/app"};
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  AddSamples(profile, {{.pid = 7, .process = "app", .thread = "a", .frames = {&leaf}, .count = 2},
                       {.pid = 7, .process = "app", .thread = "b", .frames = {&leaf}, .count = 1},
                       {.pid = 8, .process = "db", .thread = "c", .frames = {&leaf}, .count = 1}});
  profile.AttachProcessMetadata(
      7, {.container_id = "3f2a9c",
          .service_name = "checkout-deployment",
          .attributes = {{"k8s.pod.name", "web-1"}, {"service.namespace", "derived"}},
          .published = {{"service.name", "checkout"},
                        {"service.namespace", "shop"},
                        {"service.version", "1.4.2"},
                        {"deployment.environment.name", "prod"},
                        {"container.id", "forged"},
                        {"k8s.pod.name", "forged"},
                        {"process.pid", "1"},
                        {"host.name", "forged"},
                        {"service.instance.id", ""},
                        {"thread", "forged"}}});
  profile.AttachProcessMetadata(8, {.service_name = "orders-db"});
  // A span's attribute named as a process label: the sample's own says more of it.
  AddSamples(profile, {{.pid = 8,
                        .process = "db",
                        .thread = "d",
                        .frames = {&leaf},
                        .count = 1,
                        .attributes = {{"service.name", "orders-db-replica"}}}});
  const pb::Profile p = BuildPprof(profile);
  ASSERT_EQ(p.sample_size(), 4);
  const std::vector<std::map<std::string, std::string>> labels = SampleStrLabels(p);
  const std::map<std::string, std::string> want7 = {
      {"process", "app"},           {"thread", "a"},
      {"container.id", "3f2a9c"},   {"k8s.pod.name", "web-1"},
      {"service.name", "checkout"}, {"service.namespace", "shop"},
      {"service.version", "1.4.2"}, {"deployment.environment.name", "prod"}};
  EXPECT_EQ(labels[0], want7);
  std::map<std::string, std::string> want7b = want7;
  want7b["thread"] = "b";
  EXPECT_EQ(labels[1], want7b);
  EXPECT_EQ(labels[2], (std::map<std::string, std::string>{
                           {"process", "db"}, {"thread", "c"}, {"service.name", "orders-db"}}));
  EXPECT_EQ(labels[3],
            (std::map<std::string, std::string>{
                {"process", "db"}, {"thread", "d"}, {"service.name", "orders-db-replica"}}));
}

TEST(PprofWriterNamesTest, NoStringIsLongerThanTheNameCap) {
  // Frames made elsewhere than the symbolizers, which cut names at the source.
  Frame leaf{.function = std::string(100000, 'f'),
             .address = 0x10,
             .module = "/" + std::string(50000, 'm')};
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  AddSamples(profile, {{.pid = 7, .process = "app", .thread = "t", .frames = {&leaf}, .count = 1}});
  // Set as it is, not cut by AttachProcessMetadata.
  profile.process_metadata[7] = {.attributes = {{"k8s.pod.name", std::string(9000, 'p')}}};
  const uint64_t before = NamesTruncated(NameKind::kOutput);
  const pb::Profile p = BuildPprof(profile);
  for (const std::string& text : p.string_table()) EXPECT_LE(text.size(), kMaxNameBytes);
  ASSERT_EQ(p.function_size(), 1);
  EXPECT_EQ(p.string_table(p.function(0).name()),
            std::string(kMaxNameBytes - 3, 'f') + "\xE2\x80\xA6");
  EXPECT_EQ(NamesTruncated(NameKind::kOutput), before + 3);
}

TEST_F(PprofWriterTest, TablesAreDeduplicatedWithValidIds) {
  // work and work_copy share one location; work_later is another location of the same function;
  // "main" in app.cc and "main" in the tool are different functions.
  EXPECT_EQ(p_.location_size(), 8);
  EXPECT_EQ(p_.function_size(), 7);
  EXPECT_EQ(p_.mapping_size(), 6);

  auto check_ids = [](const auto& table, const char* what) {
    std::set<uint64_t> ids;
    for (const auto& e : table) {
      EXPECT_GT(e.id(), 0u) << what;
      EXPECT_LE(e.id(), static_cast<uint64_t>(table.size())) << what;
      EXPECT_TRUE(ids.insert(e.id()).second) << what << " id " << e.id() << " repeated";
    }
  };
  check_ids(p_.location(), "location");
  check_ids(p_.function(), "function");
  check_ids(p_.mapping(), "mapping");

  std::set<std::tuple<uint64_t, uint64_t, uint64_t>> locations;
  for (const pb::Location& loc : p_.location()) {
    ASSERT_EQ(loc.line_size(), 1);
    EXPECT_TRUE(
        locations.emplace(loc.mapping_id(), loc.address(), loc.line(0).function_id()).second)
        << "duplicated location at " << loc.address();
  }
  std::set<std::pair<std::string, std::string>> functions;
  for (const pb::Function& fn : p_.function()) {
    EXPECT_EQ(fn.system_name(), fn.name());
    EXPECT_TRUE(functions.emplace(Str(fn.name()), Str(fn.filename())).second)
        << "duplicated function " << Str(fn.name());
  }
  std::set<std::string> strings(p_.string_table().begin(), p_.string_table().end());
  EXPECT_EQ(strings.size(), static_cast<size_t>(p_.string_table_size())) << "duplicated strings";
}

TEST_F(PprofWriterTest, Mappings) {
  std::map<std::string, const pb::Mapping*> by_file;
  for (const pb::Mapping& m : p_.mapping()) {
    EXPECT_TRUE(by_file.emplace(Str(m.filename()), &m).second)
        << "duplicated mapping " << Str(m.filename());
    EXPECT_EQ(m.memory_start(), 0u);
    EXPECT_TRUE(m.has_functions());
  }
  ASSERT_EQ(by_file.size(), 6u);
  const pb::Mapping& app = *by_file.at("/usr/bin/app");
  EXPECT_EQ(Str(app.build_id()), "abcd01");
  EXPECT_EQ(app.memory_limit(), 0x1210u + 1);
  EXPECT_TRUE(app.has_filenames());
  EXPECT_TRUE(app.has_line_numbers());
  const pb::Mapping& kernel = *by_file.at("[kernel.kallsyms]");
  EXPECT_EQ(kernel.memory_limit(), 0xffffffff81000100u + 1);
  EXPECT_FALSE(kernel.has_filenames());
  EXPECT_FALSE(kernel.has_line_numbers());
  EXPECT_EQ(kernel.build_id(), 0);
  EXPECT_EQ(by_file.at("[ext4]")->memory_limit(), 0xffffffffc0100200u + 1);
  EXPECT_EQ(Str(by_file.at("/usr/lib/libc.so.6")->build_id()), "c0ffee");
  EXPECT_FALSE(by_file.at("/usr/lib/libc.so.6")->has_line_numbers());
  EXPECT_EQ(by_file.at("/opt/lib/libfoo.so")->memory_limit(), 0x1a2bu + 1);
  EXPECT_EQ(by_file.count("/usr/bin/tool"), 1u);
}

// Scale inlined into Middle inlined into DoubleInline, sampled there; Scale also sampled where it
// was not inlined.
struct InlineFixture {
  Frame inlined{
      FrameKind::kNative, "DoubleInline(int)", "src/app.cc", 21, 0x1580, "/usr/bin/app", "abcd01"};
  Frame scale{FrameKind::kNative, "Scale", "src/app.h", 13, 0x1600, "/usr/bin/app", "abcd01"};
  Frame app_main{FrameKind::kNative, "main", "src/app.cc", 10, 0x1100, "/usr/bin/app", "abcd01"};
  IntervalProfile profile;

  InlineFixture() {
    inlined.inlined = {{"Scale", "src/app.h", 12}, {"Middle(int)", "src/app.h", 18}};
    profile.period_ns = kPeriodNs;
    AddSamples(profile, {
                            {100, "app", "app", {&inlined, &app_main}, 3},
                            {100, "app", "app", {&scale, &app_main}, 1},
                        });
  }
};

TEST(PprofWriterInlineTest, InlinedFunctionsAreLinesOfOneLocationInnermostFirst) {
  InlineFixture f;
  const pb::Profile p = BuildPprof(f.profile);
  const auto str = [&](int64_t i) { return p.string_table(static_cast<int>(i)); };
  ASSERT_EQ(p.sample_size(), 2);
  ASSERT_EQ(p.sample(0).location_id_size(), 2) << "one location per frame, inlined or not";
  const pb::Location* loc = nullptr;
  for (const pb::Location& l : p.location()) {
    if (l.id() == p.sample(0).location_id(0)) loc = &l;
  }
  ASSERT_NE(loc, nullptr);
  EXPECT_EQ(loc->address(), 0x1580u);
  using Row = std::tuple<std::string, std::string, int64_t>;
  std::vector<Row> lines;
  for (const pb::Line& line : loc->line()) {
    const pb::Function& fn = p.function(static_cast<int>(line.function_id() - 1));
    EXPECT_EQ(fn.id(), line.function_id());
    lines.emplace_back(str(fn.name()), str(fn.filename()), line.line());
  }
  EXPECT_THAT(lines, ElementsAre(Row{"Scale", "src/app.h", 12}, Row{"Middle(int)", "src/app.h", 18},
                                 Row{"DoubleInline(int)", "src/app.cc", 21}));
  // Scale inlined and Scale out of line are one Function: Scale, Middle, DoubleInline, main.
  EXPECT_EQ(p.function_size(), 4);
  EXPECT_EQ(p.location_size(), 3);
  ASSERT_EQ(p.mapping_size(), 1);
  EXPECT_TRUE(p.mapping(0).has_inline_frames());

  // Tests that check real frames see the out-of-line function; the expanded lines see them all.
  const std::vector<ember::testing::NamedSample> named = ember::testing::NamedSamples(p);
  ASSERT_EQ(named.size(), 2u);
  EXPECT_THAT(named[0].functions, ElementsAre("DoubleInline(int)", "main"));
  EXPECT_THAT(named[0].modules, ElementsAre("/usr/bin/app", "/usr/bin/app"));
  EXPECT_THAT(named[0].lines, ElementsAre("Scale", "Middle(int)", "DoubleInline(int)", "main"));
  EXPECT_THAT(named[1].functions, ElementsAre("Scale", "main"));
  EXPECT_THAT(named[1].lines, ElementsAre("Scale", "main"));
}

TEST(PprofWriterEmptyTest, EmptyIntervalIsValid) {
  IntervalProfile empty;
  empty.period_ns = kPeriodNs;
  const pb::Profile p = BuildPprof(empty);
  EXPECT_EQ(p.sample_size(), 0);
  ASSERT_GT(p.string_table_size(), 0);
  EXPECT_EQ(p.string_table(0), "");
  EXPECT_EQ(p.sample_type_size(), 2);
}

TEST(PprofWriterFileTest, UnwritableDirectoryIsAnError) {
  Fixture f;
  const absl::Status s = WritePprofFile(f.profile, "/nonexistent-dir/ember/profile.pb.gz");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("/nonexistent-dir/ember/profile.pb.gz"));
}

// The flat column of the `pprof -top` row whose name column is `name`, or "" if none.
std::string FlatOf(const std::string& top, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(top, '\n')) {
    std::vector<absl::string_view> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cols.size() >= 6 && cols.back() == name) return std::string(cols[0]);
  }
  return "";
}

TEST(PprofToolTest, GooglePprofReadsTheFile) {
  const std::string pprof = EMBER_PPROF_PATH;
  ASSERT_FALSE(pprof.empty() || pprof.ends_with("-NOTFOUND"))
      << "Google's pprof was not found at .cache/tools/pprof; run scripts/setup.sh and reconfigure";
  Fixture f;
  const std::string path = TempPath("ember_pprof_tool_test.pb.gz");
  ASSERT_TRUE(WritePprofFile(f.profile, path).ok());

  const auto [rc, top] =
      ember::testing::RunProgram({pprof, "-top", "-symbolize=none", "-sample_index=samples", path});
  ASSERT_EQ(rc, 0) << top;
  EXPECT_THAT(top, HasSubstr("Type: samples"));
  EXPECT_THAT(top, HasSubstr("of 15 total")) << top;
  EXPECT_EQ(FlatOf(top, "Work(int)"), "6") << top;
  EXPECT_EQ(FlatOf(top, "ext4_file_write_iter"), "3") << top;
  EXPECT_EQ(FlatOf(top, "libfoo.so+0x1a2b"), "4") << top;
  EXPECT_EQ(FlatOf(top, "do_syscall_64"), "2") << top;
  EXPECT_EQ(FlatOf(top, "write"), "0") << top;
  EXPECT_THAT(top, HasSubstr(" main\n"));

  // The default sample type is CPU time: 15 samples at 10 ms each.
  const auto [cpu_rc, cpu_top] =
      ember::testing::RunProgram({pprof, "-top", "-symbolize=none", path});
  ASSERT_EQ(cpu_rc, 0) << cpu_top;
  EXPECT_THAT(cpu_top, HasSubstr("Type: cpu"));
  EXPECT_THAT(cpu_top, HasSubstr("of 150ms total")) << cpu_top;
  EXPECT_EQ(FlatOf(cpu_top, "Work(int)"), "60ms") << cpu_top;
}

// What README says one does with the trace context labels: pprof narrows a profile to one route
// or one trace by them.
TEST(PprofToolTest, GooglePprofFocusesOnOneRouteOrTrace) {
  const std::string pprof = EMBER_PPROF_PATH;
  ASSERT_FALSE(pprof.empty() || pprof.ends_with("-NOTFOUND"))
      << "Google's pprof was not found at .cache/tools/pprof; run scripts/setup.sh and reconfigure";
  Frame checkout{.function = "Checkout", .address = 0x10, .module = "/app"};
  Frame search{.function = "Search", .address = 0x20, .module = "/app"};
  Frame serve{.function = "Serve", .address = 0x30, .module = "/app"};
  const TraceLink buy = testing::LinkOf("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
  const TraceLink find = testing::LinkOf("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
  IntervalProfile profile;
  profile.period_ns = kPeriodNs;
  AddSamples(profile, {{7, "app", "a", {&checkout, &serve}, 6, buy, {{"http.route", "/checkout"}}},
                       {7, "app", "a", {&serve}, 2, buy, {{"http.route", "/checkout"}}},
                       {7, "app", "b", {&search, &serve}, 5, find, {{"http.route", "/search"}}},
                       {7, "app", "c", {&serve}, 3}});
  const std::string path = TempPath("ember_pprof_tagfocus_test.pb.gz");
  ASSERT_TRUE(WritePprofFile(profile, path).ok());
  const auto top = [&](const std::string& focus) {
    return ember::testing::RunProgram(
        {pprof, "-top", "-symbolize=none", "-sample_index=samples", "-tagfocus=" + focus, path});
  };
  const auto [rc, route] = top("http.route=/checkout");
  ASSERT_EQ(rc, 0) << route;
  EXPECT_THAT(route, HasSubstr("accounting for 8, 50.00% of 16 total")) << route;
  EXPECT_EQ(FlatOf(route, "Checkout"), "6") << route;
  EXPECT_EQ(FlatOf(route, "Search"), "") << route;
  const auto [trace_rc, trace] = top("trace_id=4bf92f3577b34da6a3ce929d0e0e4736");
  ASSERT_EQ(trace_rc, 0) << trace;
  EXPECT_THAT(trace, HasSubstr("accounting for 5, 31.25% of 16 total")) << trace;
  EXPECT_EQ(FlatOf(trace, "Search"), "5") << trace;
}

TEST(PprofToolTest, GooglePprofShowsInlinedFunctions) {
  const std::string pprof = EMBER_PPROF_PATH;
  ASSERT_FALSE(pprof.empty() || pprof.ends_with("-NOTFOUND"))
      << "Google's pprof was not found at .cache/tools/pprof; run scripts/setup.sh and reconfigure";
  InlineFixture f;
  const std::string path = TempPath("ember_pprof_inline_test.pb.gz");
  ASSERT_TRUE(WritePprofFile(f.profile, path).ok());
  const auto [rc, top] =
      ember::testing::RunProgram({pprof, "-top", "-symbolize=none", "-sample_index=samples", path});
  ASSERT_EQ(rc, 0) << top;
  // The innermost inlined function is where the samples are; its callers have none of their own.
  // pprof marks a function "(inline)" where it was inlined, "(partial-inline)" when only some of
  // its samples were.
  EXPECT_THAT(top, ContainsRegex("\n +4 .* Scale \\(partial-inline\\)\n")) << top;
  EXPECT_THAT(top, ContainsRegex("\n +0 .* Middle\\(int\\) \\(inline\\)\n")) << top;
  EXPECT_THAT(top, ContainsRegex("\n +0 .* DoubleInline\\(int\\)\n")) << top;
  const auto [traces_rc, traces] =
      ember::testing::RunProgram({pprof, "-traces", "-symbolize=none", path});
  ASSERT_EQ(traces_rc, 0) << traces;
  EXPECT_THAT(traces,
              ContainsRegex("\n +30ms +Scale \\(inline\\)\n +Middle\\(int\\) \\(inline\\)\n "
                            "+DoubleInline\\(int\\)\n +main\n"))
      << traces;
}

}  // namespace
}  // namespace ember
