#include "server/tcp_address.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::server {
namespace {

// Address schemes gRPC gives a meaning of its own before a colon.
constexpr absl::string_view kGrpcSchemes[] = {"unix", "unix-abstract", "vsock", "ipv4", "ipv6",
                                             "dns"};

bool IsHostLabel(absl::string_view label) {
  if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
    return false;
  }
  for (char c : label) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

absl::Status CheckHost(absl::string_view host) {
  if (host.empty()) return absl::InvalidArgumentError("the host is empty");
  if (host.front() == '[') {
    if (host.back() != ']') return absl::InvalidArgumentError("an IPv6 host needs its ']'");
    const std::string inner(host.substr(1, host.size() - 2));
    in6_addr addr{};
    if (inet_pton(AF_INET6, inner.c_str(), &addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("'", inner, "' is not an IPv6 address"));
    }
    return absl::OkStatus();
  }
  for (absl::string_view scheme : kGrpcSchemes) {
    if (absl::EqualsIgnoreCase(host, scheme)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", host, ":' is a gRPC address scheme, not a host (a unix socket is --socket)"));
    }
  }
  if (host.find(':') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host, "' is not a host name (an IPv6 address goes in brackets: [::1])"));
  }
  if (host.size() > 253) return absl::InvalidArgumentError("the host name is too long");
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (!IsHostLabel(label)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", host, "' is not a host name or IPv4 address (letters, digits, '-' and '.')"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ParseTcpAddress(absl::string_view address) {
  auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tcp takes HOST:PORT, not '", address, "': ", why));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return fail("there is no ':PORT'");
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port_text = address.substr(colon + 1);
  if (absl::Status s = CheckHost(host); !s.ok()) return fail(s.message());
  int port = 0;
  const bool digits = !port_text.empty() && port_text.size() <= 5 &&
                      port_text.find_first_not_of("0123456789") == absl::string_view::npos;
  if (!digits || !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return fail(absl::StrCat("the port '", port_text, "' is not a number from 1 to 65535"));
  }
  return std::string(address);
}

}  // namespace kiln::server
