// The fuzzers' in-process daemon: with no unix listener to vouch for its
// callers, they carry the daemon's token, as TCP clients do.
#pragma once

#include <grpcpp/grpcpp.h>

namespace kiln::testing {

inline constexpr char kFuzzToken[] = "fuzz-token-0123456789abcdef";

inline void Authorize(grpc::ClientContext* ctx) {
  ctx->AddMetadata("authorization", std::string("Bearer ") + kFuzzToken);
}

}  // namespace kiln::testing
