// Registration checks and the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
#include "status/metrics_registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace ember {

struct MetricsRegistry::Series {
  std::variant<Counter, DoubleCounter, Gauge, MetricCallback> value;
  std::string labels_text;  // `{a="x",b="y"}`, or empty; also the series' identity
};

struct MetricsRegistry::Family {
  std::string name;
  std::string help;  // escaped
  MetricType type;
  std::vector<std::unique_ptr<Series>> series;
};

namespace {

bool IsNameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(absl::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, colon)) return false;
  }
  return true;
}

std::string Escape(absl::string_view text, bool quote) {
  std::string valid = ToValidUtf8(text);
  std::string out;
  out.reserve(valid.size());
  for (char c : valid) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

absl::StatusOr<std::string> LabelsText(absl::string_view metric, MetricLabels labels) {
  if (labels.empty()) return std::string();
  std::sort(labels.begin(), labels.end());
  std::string text = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto& [name, value] = labels[i];
    if (!IsValidLabelName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(metric, ": label name '", name,
                       "' is not [a-zA-Z_][a-zA-Z0-9_]* or starts with the reserved __"));
    }
    if (i > 0 && labels[i - 1].first == name) {
      return absl::InvalidArgumentError(absl::StrCat(metric, ": label '", name, "' given twice"));
    }
    absl::StrAppend(&text, i > 0 ? "," : "", name, "=\"", EscapeLabelValue(value), "\"");
  }
  text += "}";
  return text;
}

}  // namespace

bool IsValidMetricName(absl::string_view name) { return IsValidName(name, /*colon=*/true); }

bool IsValidLabelName(absl::string_view name) {
  return IsValidName(name, /*colon=*/false) && !absl::StartsWith(name, "__");
}

std::string EscapeHelp(absl::string_view help) { return Escape(help, /*quote=*/false); }

std::string EscapeLabelValue(absl::string_view value) { return Escape(value, /*quote=*/true); }

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

absl::Status MetricsRegistry::AddSeries(MetricType type, absl::string_view name,
                                        absl::string_view help, MetricLabels labels,
                                        std::unique_ptr<Series> series) {
  if (!IsValidMetricName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", name, "' is not [a-zA-Z_:][a-zA-Z0-9_:]*"));
  }
  if (type == MetricType::kCounter && !absl::EndsWith(name, "_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter '", name, "' must be named *_total (Prometheus convention)"));
  }
  auto labels_text = LabelsText(name, std::move(labels));
  if (!labels_text.ok()) return labels_text.status();
  series->labels_text = *std::move(labels_text);
  std::string escaped_help = EscapeHelp(help);

  std::lock_guard lock(mu_);
  Family* family;
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    family = it->second;
    if (family->type != type || family->help != escaped_help) {
      return absl::AlreadyExistsError(
          absl::StrCat("metric '", name, "' is already registered with another type or help"));
    }
    for (const auto& existing : family->series) {
      if (existing->labels_text == series->labels_text) {
        return absl::AlreadyExistsError(
            absl::StrCat("series ", name, series->labels_text, " is already registered"));
      }
    }
  } else {
    auto created = std::make_unique<Family>();
    created->name = std::string(name);
    created->help = std::move(escaped_help);
    created->type = type;
    family = created.get();
    families_.push_back(std::move(created));
    by_name_.emplace(family->name, family);
  }
  family->series.push_back(std::move(series));
  return absl::OkStatus();
}

absl::StatusOr<Counter*> MetricsRegistry::AddCounter(absl::string_view name, absl::string_view help,
                                                     MetricLabels labels) {
  auto series = std::make_unique<Series>();
  Counter* counter = &series->value.emplace<Counter>();
  absl::Status status =
      AddSeries(MetricType::kCounter, name, help, std::move(labels), std::move(series));
  if (!status.ok()) return status;
  return counter;
}

absl::StatusOr<DoubleCounter*> MetricsRegistry::AddDoubleCounter(absl::string_view name,
                                                                 absl::string_view help,
                                                                 MetricLabels labels) {
  auto series = std::make_unique<Series>();
  DoubleCounter* counter = &series->value.emplace<DoubleCounter>();
  absl::Status status =
      AddSeries(MetricType::kCounter, name, help, std::move(labels), std::move(series));
  if (!status.ok()) return status;
  return counter;
}

absl::StatusOr<Gauge*> MetricsRegistry::AddGauge(absl::string_view name, absl::string_view help,
                                                 MetricLabels labels) {
  auto series = std::make_unique<Series>();
  Gauge* gauge = &series->value.emplace<Gauge>();
  absl::Status status =
      AddSeries(MetricType::kGauge, name, help, std::move(labels), std::move(series));
  if (!status.ok()) return status;
  return gauge;
}

absl::Status MetricsRegistry::AddCallbackGauge(absl::string_view name, absl::string_view help,
                                               MetricLabels labels, MetricCallback callback) {
  if (!callback) return absl::InvalidArgumentError(absl::StrCat(name, ": no callback"));
  auto series = std::make_unique<Series>();
  series->value.emplace<MetricCallback>(std::move(callback));
  return AddSeries(MetricType::kGauge, name, help, std::move(labels), std::move(series));
}

absl::Status MetricsRegistry::AddCallbackCounter(absl::string_view name, absl::string_view help,
                                                 MetricLabels labels, MetricCallback callback) {
  if (!callback) return absl::InvalidArgumentError(absl::StrCat(name, ": no callback"));
  auto series = std::make_unique<Series>();
  series->value.emplace<MetricCallback>(std::move(callback));
  return AddSeries(MetricType::kCounter, name, help, std::move(labels), std::move(series));
}

std::string MetricsRegistry::Render() const {
  std::string out;
  std::string samples;
  std::lock_guard lock(mu_);
  for (const auto& family : families_) {
    samples.clear();
    for (const auto& series : family->series) {
      std::string value;
      if (const auto* counter = std::get_if<Counter>(&series->value)) {
        value = absl::StrCat(counter->Value());
      } else if (const auto* total = std::get_if<DoubleCounter>(&series->value)) {
        value = FormatMetricValue(total->Value());
      } else if (const auto* gauge = std::get_if<Gauge>(&series->value)) {
        value = FormatMetricValue(gauge->Value());
      } else {
        std::optional<double> computed = std::get<MetricCallback>(series->value)();
        if (!computed) continue;
        value = FormatMetricValue(*computed);
      }
      absl::StrAppend(&samples, family->name, series->labels_text, " ", value, "\n");
    }
    // A family whose callbacks all failed this time is left out rather than shown empty.
    if (samples.empty()) continue;
    absl::StrAppend(&out, "# HELP ", family->name, " ", family->help, "\n", "# TYPE ", family->name,
                    family->type == MetricType::kCounter ? " counter\n" : " gauge\n", samples);
  }
  return out;
}

}  // namespace ember
