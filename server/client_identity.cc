#include "server/client_identity.h"

#include "absl/strings/str_cat.h"
#include "runtime/util/status_macros.h"
#include "server/process_watch.h"

namespace kiln::server {
namespace {

// A namespace claim the kernel contradicts. 0 claims nothing.
absl::Status CheckNamespaceClaim(uint64_t claimed, uint64_t actual, int peer_pid) {
  if (claimed == 0 || claimed == actual) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "OpenSession claims pid namespace ", claimed, " but the connection is from pid ", peer_pid,
      " in pid namespace ", actual));
}

}  // namespace

absl::StatusOr<ClientIdentity> ResolveClientIdentity(int64_t claimed_pid,
                                                     uint64_t claimed_namespace,
                                                     const std::optional<PeerCredentials>& peer,
                                                     uint64_t own_namespace) {
  if (claimed_pid < 0 || claimed_pid > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("OpenSession: pid ", claimed_pid, " is not a pid"));
  }
  const int pid = static_cast<int>(claimed_pid);
  if (!peer.has_value()) {
    // TCP: nothing to hold the claim against; nothing watched on its word.
    return ClientIdentity{pid, std::nullopt};
  }
  if (peer->pid <= 0) {
    // The kernel could not map the peer into the daemon's pid namespace, so
    // it is not in it (nor in one nested in it).
    if (claimed_namespace != 0 && claimed_namespace == own_namespace) {
      return absl::PermissionDeniedError(absl::StrCat(
          "OpenSession claims the daemon's pid namespace (", own_namespace,
          ") but the connection comes from outside it (the kernel reports no pid for it)"));
    }
    return ClientIdentity{pid, std::nullopt};
  }
  // Asked of the kernel, never taken from the request: a client that says
  // pid_namespace 0 or another namespace is checked all the same.
  absl::StatusOr<uint64_t> peer_namespace = PidNamespaceOf(peer->pid);
  if (!peer_namespace.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "OpenSession: cannot tell which pid namespace the connecting process (pid ", peer->pid,
        ") is in, so its pid cannot be checked: ", peer_namespace.status().message()));
  }
  int own_pid = peer->pid;  // the peer's pid in its own namespace
  if (*peer_namespace != own_namespace) {
    absl::StatusOr<int> inner = PidInOwnNamespace(peer->pid);
    if (!inner.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "OpenSession: cannot tell the pid the connecting process (pid ", peer->pid,
          " here) has in its own pid namespace: ", inner.status().message()));
    }
    own_pid = *inner;
  }
  if (pid != 0 && pid != own_pid) {
    return absl::PermissionDeniedError(
        *peer_namespace == own_namespace
            ? absl::StrCat("OpenSession claims pid ", pid, " but the connection is from pid ",
                           peer->pid)
            : absl::StrCat("OpenSession claims pid ", pid, " but the connection is from pid ",
                           own_pid, " of pid namespace ", *peer_namespace, " (pid ", peer->pid,
                           " in the daemon's)"));
  }
  KILN_RETURN_IF_ERROR(CheckNamespaceClaim(claimed_namespace, *peer_namespace, peer->pid));
  return ClientIdentity{own_pid, peer->pid};
}

}  // namespace kiln::server
