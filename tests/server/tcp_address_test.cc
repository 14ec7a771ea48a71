// --tcp takes HOST:PORT only: no gRPC address schemes (a unix: listener
// would skip the daemon's credential check), a port a client can know.
#include "server/tcp_address.h"

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

TEST(TcpAddressTest, HostAndPortAreAccepted) {
  for (const char* address : {"127.0.0.1:7000", "localhost:7000", "0.0.0.0:1", "[::1]:65535",
                              "[::]:7000", "kiln-host.example.com:443"}) {
    auto parsed = ParseTcpAddress(address);
    ASSERT_TRUE(parsed.ok()) << address << ": " << parsed.status();
    EXPECT_EQ(*parsed, address);
  }
}

TEST(TcpAddressTest, GrpcSchemesAreRefused) {
  for (const char* address :
       {"unix:/tmp/kiln.sock", "unix:7000", "UNIX:7000", "unix-abstract:kiln", "unix:///tmp/x",
        "vsock:3:7000", "ipv4:127.0.0.1:7000", "ipv6:[::1]:7000", "dns:///localhost:7000"}) {
    auto parsed = ParseTcpAddress(address);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_NE(parsed.status().message().find("--tcp takes HOST:PORT"), std::string::npos)
        << parsed.status();
  }
  EXPECT_NE(ParseTcpAddress("unix:7000").status().message().find("--socket"), std::string::npos);
}

TEST(TcpAddressTest, BadHostsAndPortsAreRefused) {
  for (const char* address :
       {"", ":7000", "7000", "localhost", "localhost:", "localhost:0", "localhost:65536",
        "localhost:-1", "localhost:+80", "localhost:7000x", "::1:7000", "[::1:7000",
        "[nothex]:7000", "-bad.example:7000", "a..b:7000", "host/path:7000", "a b:7000",
        "localhost:070000"}) {
    EXPECT_EQ(ParseTcpAddress(address).status().code(), absl::StatusCode::kInvalidArgument)
        << address;
  }
}

}  // namespace
}  // namespace kiln::server
