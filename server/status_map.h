// The one place where runtime/cache statuses become gRPC statuses.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace kiln::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace kiln::server
