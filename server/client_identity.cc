#include "server/client_identity.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "server/process_watch.h"

namespace kiln::server {

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
  ProcessView seen, own;
  absl::StatusOr<uint64_t> peer_namespace = PidNamespaceOf(peer->pid);
  if (peer_namespace.ok()) {
    seen.pid_namespace = *peer_namespace;
  } else if (peer_namespace.status().code() != absl::StatusCode::kPermissionDenied) {
    return absl::PermissionDeniedError(absl::StrCat(
        "OpenSession: the connecting process (pid ", peer->pid,
        ") cannot be looked up, so its pid cannot be checked: ",
        peer_namespace.status().message()));
  }
  absl::StatusOr<std::vector<int>> peer_pids = NamespacePids(peer->pid);
  if (!peer_pids.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "OpenSession: cannot tell the pid the connecting process (pid ", peer->pid,
        " here) has in its own pid namespace: ", peer_pids.status().message()));
  }
  seen.namespace_pids = *std::move(peer_pids);
  if (own_namespace != 0) own.pid_namespace = own_namespace;
  if (!seen.pid_namespace.has_value()) {
    // Only needed to compare depths when the peer's namespace is unknown.
    if (auto own_pids = NamespacePids(getpid()); own_pids.ok()) {
      own.namespace_pids = *std::move(own_pids);
    }
  }
  return ResolveSeenClient(pid, claimed_namespace, peer->pid, seen, own);
}

absl::StatusOr<ClientIdentity> ResolveSeenClient(int claimed_pid, uint64_t claimed_namespace,
                                                 int peer_pid, const ProcessView& peer,
                                                 const ProcessView& own) {
  if (peer.namespace_pids.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "OpenSession: cannot tell the pid the connecting process (pid ", peer_pid,
        " here) has in its own pid namespace"));
  }
  bool same_namespace = false;
  if (peer.pid_namespace.has_value() && own.pid_namespace.has_value()) {
    same_namespace = *peer.pid_namespace == *own.pid_namespace;
  } else if (!own.namespace_pids.empty()) {
    // The daemon sees the peer, so the peer's namespace is the daemon's or
    // nested in it; a nested one lists more pids.
    same_namespace = peer.namespace_pids.size() == own.namespace_pids.size();
  } else {
    return absl::PermissionDeniedError(absl::StrCat(
        "OpenSession: cannot tell which pid namespace the connecting process (pid ", peer_pid,
        ") is in, so its pid cannot be checked"));
  }
  const int own_pid = same_namespace ? peer_pid : peer.namespace_pids.back();
  if (claimed_pid != 0 && claimed_pid != own_pid) {
    return absl::PermissionDeniedError(
        same_namespace
            ? absl::StrCat("OpenSession claims pid ", claimed_pid,
                           " but the connection is from pid ", peer_pid)
            : absl::StrCat("OpenSession claims pid ", claimed_pid,
                           " but the connection is from pid ", own_pid, " of pid namespace ",
                           peer.pid_namespace.has_value()
                               ? absl::StrCat(*peer.pid_namespace)
                               : std::string("(one nested in the daemon's)"),
                           " (pid ", peer_pid, " in the daemon's)"));
  }
  if (claimed_namespace != 0) {
    // Checked against the kernel's answer where the daemon may read it;
    // otherwise the claim can at least not contradict same_namespace.
    const bool lie =
        peer.pid_namespace.has_value()
            ? claimed_namespace != *peer.pid_namespace
            : own.pid_namespace.has_value() &&
                  (claimed_namespace == *own.pid_namespace) != same_namespace;
    if (lie) {
      return absl::PermissionDeniedError(absl::StrCat(
          "OpenSession claims pid namespace ", claimed_namespace,
          " but the connection is from pid ", peer_pid, " in ",
          peer.pid_namespace.has_value() ? absl::StrCat("pid namespace ", *peer.pid_namespace)
          : same_namespace               ? std::string("the daemon's pid namespace")
                                         : std::string("a pid namespace nested in the daemon's")));
    }
  }
  return ClientIdentity{own_pid, peer_pid};
}

}  // namespace kiln::server
