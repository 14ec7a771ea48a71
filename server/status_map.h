// The one place where runtime/cache statuses become gRPC statuses.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace kiln::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

// Finishes a unary callback call with `status` mapped as ToGrpcStatus does;
// the handler returns the reactor this gives.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                      const absl::Status& status);

}  // namespace kiln::server
