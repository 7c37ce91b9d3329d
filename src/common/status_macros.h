// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, which Debian's abseil (20220623) lacks.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define EMBER_CONCAT_INNER(a, b) a##b
#define EMBER_CONCAT(a, b) EMBER_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status ember_status_ = (expr);         \
    if (!ember_status_.ok()) return ember_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(EMBER_CONCAT(ember_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                          \
  if (!statusor.ok()) return statusor.status();    \
  lhs = std::move(statusor).value()
