// The registry's text output, read back with the strict checker; registration errors; escaping;
// updates from several threads while rendering.
#include "status/metrics_registry.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposition_checker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

using ::ember::testing::Exposition;
using ::ember::testing::ParseExposition;
using ::testing::HasSubstr;

Exposition Parsed(const MetricsRegistry& registry) {
  std::string text = registry.Render();
  auto parsed = ParseExposition(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  return parsed.ok() ? *parsed : Exposition{};
}

TEST(MetricsRegistryTest, RendersTheTextFormat) {
  MetricsRegistry registry;
  Counter* samples = *registry.AddCounter("ember_samples_total", "Stack samples read.");
  Counter* no_cfi = *registry.AddCounter("ember_unwind_stops_total", "Unwinds that stopped early.",
                                         {{"reason", "no_cfi"}});
  Counter* bad_pc = *registry.AddCounter("ember_unwind_stops_total", "Unwinds that stopped early.",
                                         {{"reason", "bad_pc"}});
  Gauge* queue = *registry.AddGauge("ember_export_queue_bytes", "Bytes waiting to be sent.");
  DoubleCounter* seconds =
      *registry.AddDoubleCounter("ember_export_seconds_total", "Time spent exporting.");
  samples->Increment();
  samples->Increment(41);
  no_cfi->Increment(3);
  queue->Set(1024);
  queue->Add(-24);
  seconds->Add(0.25);
  seconds->Add(-5);  // dropped: a counter never goes down
  seconds->Add(NAN);
  EXPECT_EQ(bad_pc->Value(), 0u);

  EXPECT_EQ(registry.Render(),
            "# HELP ember_samples_total Stack samples read.\n"
            "# TYPE ember_samples_total counter\n"
            "ember_samples_total 42\n"
            "# HELP ember_unwind_stops_total Unwinds that stopped early.\n"
            "# TYPE ember_unwind_stops_total counter\n"
            "ember_unwind_stops_total{reason=\"no_cfi\"} 3\n"
            "ember_unwind_stops_total{reason=\"bad_pc\"} 0\n"
            "# HELP ember_export_queue_bytes Bytes waiting to be sent.\n"
            "# TYPE ember_export_queue_bytes gauge\n"
            "ember_export_queue_bytes 1000\n"
            "# HELP ember_export_seconds_total Time spent exporting.\n"
            "# TYPE ember_export_seconds_total counter\n"
            "ember_export_seconds_total 0.25\n");
  Exposition parsed = Parsed(registry);
  EXPECT_EQ(parsed.types["ember_unwind_stops_total"], "counter");
  EXPECT_EQ(parsed.types["ember_export_queue_bytes"], "gauge");
  EXPECT_EQ(parsed.samples["ember_samples_total"], 42);
  EXPECT_EQ(parsed.samples["ember_unwind_stops_total{reason=\"no_cfi\"}"], 3);
}

TEST(CounterMirrorTest, AddsWhatTheTotalGrewBySinceTheLastPublish) {
  MetricsRegistry registry;
  Counter* counter = registry.AddCounter("ember_mirrored_total", "A total kept elsewhere.").value();
  CounterMirror mirror(counter);
  mirror.Publish(5);
  EXPECT_EQ(counter->Value(), 5u);
  mirror.Publish(5);  // nothing new
  EXPECT_EQ(counter->Value(), 5u);
  counter->Increment(2);  // the counter keeps what else was added to it
  mirror.Publish(8);
  EXPECT_EQ(counter->Value(), 10u);
  mirror.Publish(3);  // the total was reset (its owner started over): a counter never goes down
  EXPECT_EQ(counter->Value(), 10u);
  mirror.Publish(4);
  EXPECT_EQ(counter->Value(), 11u);
}

TEST(MetricsRegistryTest, EmptyRegistryRendersNothing) {
  MetricsRegistry registry;
  EXPECT_EQ(registry.Render(), "");
  EXPECT_TRUE(ParseExposition("").ok());
}

TEST(MetricsRegistryTest, LabelsAreSortedAndEscaped) {
  MetricsRegistry registry;
  ASSERT_TRUE(registry
                  .AddGauge("ember_info", "Help with a \\ backslash\nand a newline \"quoted\".",
                            {{"zone", "a\\b"},
                             {"node", "say \"hi\"\nbye"},
                             {"utf8", "caf\xC3\xA9"},
                             {"bad", "x\xFFy"}})
                  .ok());
  std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("# HELP ember_info Help with a \\\\ backslash\\nand a newline "
                              "\"quoted\".\n"));
  EXPECT_THAT(text, HasSubstr("ember_info{bad=\"x\xEF\xBF\xBDy\",node=\"say \\\"hi\\\"\\nbye\","
                              "utf8=\"caf\xC3\xA9\",zone=\"a\\\\b\"} 0\n"));
  Exposition parsed = Parsed(registry);
  EXPECT_EQ(parsed.helps["ember_info"], "Help with a \\ backslash\nand a newline \"quoted\".");
  // The same labels in another order are the same series.
  EXPECT_EQ(registry
                .AddGauge("ember_info", "Help with a \\ backslash\nand a newline \"quoted\".",
                          {{"utf8", "caf\xC3\xA9"},
                           {"zone", "a\\b"},
                           {"bad", "x\xFFy"},
                           {"node", "say \"hi\"\nbye"}})
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(MetricsRegistryTest, ValuesKeepTheirPrecisionAndSpecialValues) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-2.5), "-2.5");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(1e21), "1e+21");
  EXPECT_EQ(FormatMetricValue(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(FormatMetricValue(NAN), "NaN");
  EXPECT_EQ(FormatMetricValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatMetricValue(-INFINITY), "-Inf");

  MetricsRegistry registry;
  Counter* big = *registry.AddCounter("ember_big_total", "Big.");
  big->Increment(std::numeric_limits<uint64_t>::max());
  Gauge* inf = *registry.AddGauge("ember_inf", "Inf.");
  inf->Set(INFINITY);
  EXPECT_THAT(registry.Render(), HasSubstr("ember_big_total 18446744073709551615\n"));
  Exposition parsed = Parsed(registry);
  EXPECT_TRUE(std::isinf(parsed.samples["ember_inf"]));
}

TEST(MetricsRegistryTest, CallbacksRunAtRenderAndMayLeaveTheSeriesOut) {
  MetricsRegistry registry;
  std::atomic<int> calls = 0;
  std::atomic<bool> available = true;
  ASSERT_TRUE(registry
                  .AddCallbackGauge("ember_callback", "Computed.", {},
                                    [&]() -> std::optional<double> {
                                      ++calls;
                                      if (!available) return std::nullopt;
                                      return 1.5 * calls;
                                    })
                  .ok());
  ASSERT_TRUE(registry
                  .AddCallbackCounter("ember_cb_total", "Computed total.", {{"k", "v"}},
                                      [] { return std::optional<double>(7); })
                  .ok());
  EXPECT_THAT(registry.Render(), HasSubstr("ember_callback 1.5\n"));
  EXPECT_THAT(registry.Render(), HasSubstr("ember_callback 3\n"));
  available = false;
  std::string text = registry.Render();
  // The whole family goes, HELP and TYPE included, rather than a family without samples.
  EXPECT_EQ(text.find("ember_callback"), std::string::npos) << text;
  EXPECT_THAT(text, HasSubstr("# TYPE ember_cb_total counter\nember_cb_total{k=\"v\"} 7\n"));
  EXPECT_FALSE(registry.AddCallbackGauge("ember_none", "No callback.", {}, nullptr).ok());
}

TEST(MetricsRegistryTest, RegistrationMistakesAreErrors) {
  MetricsRegistry registry;
  ASSERT_TRUE(registry.AddCounter("ember_a_total", "A.").ok());
  auto code = [](const auto& result) { return result.status().code(); };
  EXPECT_EQ(code(registry.AddCounter("ember_a", "Not _total.")),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(registry.AddCounter("ember_a", "x").status().message()),
              HasSubstr("must be named *_total"));
  EXPECT_EQ(code(registry.AddCounter("ember_a_total", "A.")), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(code(registry.AddCounter("ember_a_total", "Another help.", {{"x", "1"}})),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(code(registry.AddGauge("ember_a_total", "A.")), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(registry.AddCounter("ember_a_total", "A.", {{"x", "1"}}).ok());
  for (absl::string_view bad : {"", "1abc", "ember-x", "ember x", "émber"}) {
    EXPECT_EQ(code(registry.AddGauge(bad, "Bad.")), absl::StatusCode::kInvalidArgument) << bad;
  }
  for (absl::string_view bad : {"", "1a", "a:b", "__reserved", "a-b"}) {
    EXPECT_EQ(code(registry.AddGauge("ember_g", "G.", {{std::string(bad), "v"}})),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(code(registry.AddGauge("ember_g", "G.", {{"a", "1"}, {"a", "2"}})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsValidMetricName("ember:recorded_rule"));
  EXPECT_TRUE(IsValidLabelName("_a1"));
  // Nothing half-registered after the errors.
  EXPECT_TRUE(Parsed(registry).samples.size() == 2);
}

TEST(MetricsRegistryTest, ConcurrentUpdatesRegistrationAndRendering) {
  MetricsRegistry registry;
  Counter* counter = *registry.AddCounter("ember_events_total", "Events.");
  Gauge* gauge = *registry.AddGauge("ember_level", "Level.");
  constexpr uint64_t kPerThread = 200000;
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        counter->Increment();
        gauge->Add(1);
      }
    });
  }
  std::thread registrar([&] {
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(registry.AddCounter("ember_late_total", "Late.", {{"i", absl::StrCat(i)}}).ok());
    }
  });
  double last = 0;
  for (int i = 0; i < 200; ++i) {
    Exposition parsed = Parsed(registry);
    double now = parsed.samples["ember_events_total"];
    EXPECT_GE(now, last);
    last = now;
  }
  for (auto& writer : writers) writer.join();
  registrar.join();
  Exposition parsed = Parsed(registry);
  EXPECT_EQ(parsed.samples["ember_events_total"], 2 * kPerThread);
  EXPECT_EQ(parsed.samples["ember_level"], 2 * kPerThread);
  EXPECT_EQ(parsed.samples.count("ember_late_total{i=\"199\"}"), 1u);
}

TEST(ExpositionCheckerTest, RejectsMalformedText) {
  for (absl::string_view bad : {
           "no_newline 1",
           "bad-name 1\n",
           "m{a=\"x} 1\n",
           "m{a=\"\\t\"} 1\n",
           "m{a=\"1\",a=\"2\"} 1\n",
           "m one\n",
           "m 1 2 3\n",
           "m 1\nm 2\n",
           "a 1\nb 1\na 2\n",
           "m 1\n# TYPE m gauge\n",
           "# TYPE m gauge\n# TYPE m gauge\n",
           "# TYPE m counter\n",
           "# TYPE m thing\n",
           "# HELP m bad \\t escape\n",
       }) {
    EXPECT_FALSE(ParseExposition(bad).ok()) << bad;
  }
  EXPECT_TRUE(ParseExposition("# a comment\n\nm{a=\"\\\"\\n\\\\\"} -1.5e3 1700000000000\n").ok());
}

}  // namespace
}  // namespace ember
