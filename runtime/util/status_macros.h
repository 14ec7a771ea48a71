// Status plumbing used across the runtime, cache and server.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define KILN_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::absl::Status kiln_status_ = (expr);          \
    if (!kiln_status_.ok()) return kiln_status_;   \
  } while (0)

// `KILN_ASSIGN_OR_RETURN(auto x, F());` binds x to the value of a StatusOr or
// returns its status.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_statusor_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
