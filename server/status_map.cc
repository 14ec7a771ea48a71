#include "server/status_map.h"

#include <string>

namespace kiln::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                      const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace kiln::server
