// Turns the exceptions a request path can throw into that request's status.
//
// The daemon's code reports errors as statuses, but the C++ library under
// it throws when memory runs out (std::bad_alloc, std::length_error) or a
// thread cannot be made (std::system_error). Such an exception must fail
// the one request that hit it: escaping a gRPC callback or a daemon thread,
// it would end the process (std::terminate) and every client's session
// with it. Every RPC handler and every thread that serves clients runs its
// work through Guarded().
#pragma once

#include <new>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kiln::server {

// Runs `body` (returning absl::Status); RESOURCE_EXHAUSTED for running out
// of memory or threads while doing `what`, INTERNAL for any other exception.
template <typename F>
absl::Status Guarded(absl::string_view what, F&& body) noexcept {
  try {
    return std::forward<F>(body)();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory while ", what));
  } catch (const std::length_error&) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory while ", what));
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the system refused a resource while ", what, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("unexpected error while ", what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat("unexpected error while ", what));
  }
}

}  // namespace kiln::server
