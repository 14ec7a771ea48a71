// The address --tcp takes: HOST:PORT and nothing else.
//
// gRPC's AddListeningPort reads more than host and port: "unix:PATH",
// "unix-abstract:NAME" and "vsock:CID:PORT" make it listen on a socket of
// that kind. Such a listener would bypass the daemon's own unix listener
// (peer_listener.h), whose credential check is what lets unix-socket
// clients in without the token, so --tcp must not be able to open one.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::server {

// `address` if it is HOST:PORT: HOST a DNS name or IPv4 address (letters,
// digits, '-' and '.'), or an IPv6 address in brackets ("[::1]:7000"), and
// not one of gRPC's address schemes; PORT from 1 to 65535 (0 would pick a
// port no client can know). INVALID_ARGUMENT saying what is wrong otherwise.
[[nodiscard]] absl::StatusOr<std::string> ParseTcpAddress(absl::string_view address);

}  // namespace kiln::server
