// Who a client is: what it claims in OpenSession (its pid, its pid
// namespace) held against what the kernel says about its connection.
//
// The pid a session carries names the client's shared-memory objects
// ("kiln-<pid>-...": the only ones it may register) and, when the daemon
// can see the process, decides when the session closes. A client that
// could claim another process's pid could have the daemon map that
// process's objects for it. So wherever the kernel can tell, the claim must
// match it, whatever the client says about its namespace:
//
// - Unix socket, the peer in the daemon's pid namespace (its
//   /proc/<pid>/ns/pid is the daemon's own; where the kernel will not let
//   the daemon read that, its NSpid list is as long as the daemon's): the
//   claimed pid must be the peer's pid (SO_PEERCRED).
// - Unix socket, the peer in a pid namespace nested in the daemon's (a
//   container beside a daemon on the host): the claimed pid must be the one
//   the process has in its own namespace (the last NSpid of its status).
// - Either way a claimed pid_namespace other than 0 must be the peer's real
//   one (as far as the daemon can read it), and the daemon watches the
//   process it sees (no Hold needed).
// - Unix socket, the peer outside the daemon's view (the kernel reports pid
//   0: the daemon is the one in a container): nothing can be checked; the
//   claim is taken, except that it cannot say it is in the daemon's
//   namespace, and the client must keep a Hold call open.
// - TCP (no peer credentials): the token is the credential. The claim is
//   taken as is and never watched (a pid the client only names could be
//   anyone's): the client must keep a Hold call open.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/peer_listener.h"

namespace kiln::server {

struct ClientIdentity {
  // The client's pid in its own namespace: the "kiln-<pid>-" of its objects.
  int pid = 0;
  // The same process as the daemon sees it, when the kernel vouches for
  // it; the session closes when it exits. Unset: the client holds a Hold.
  std::optional<int> watch;
};

// What /proc says about a connected process (process_watch.h).
struct ProcessView {
  // Its /proc/<pid>/ns/pid; unset when the kernel will not let the daemon
  // read it (that needs ptrace access).
  std::optional<uint64_t> pid_namespace;
  // Its NSpid, outermost namespace first: the last is its own pid there.
  std::vector<int> namespace_pids;
};

// The identity of a client that claims `claimed_pid` (0: "ask the kernel")
// in the pid namespace `claimed_namespace` (0: not said) over a connection
// with credentials `peer` (nullopt: not the daemon's unix listener, i.e.
// TCP). `own_namespace` is the daemon's (OwnPidNamespace()).
// INVALID_ARGUMENT for a negative pid; PERMISSION_DENIED, saying what the
// kernel reports, for a claim it contradicts or a peer it will not describe.
[[nodiscard]] absl::StatusOr<ClientIdentity> ResolveClientIdentity(
    int64_t claimed_pid, uint64_t claimed_namespace, const std::optional<PeerCredentials>& peer,
    uint64_t own_namespace);

// The same decision for a peer with pid > 0, given what /proc says about
// it (`peer`) and about the daemon (`own`): what ResolveClientIdentity
// reads, separated so that views the tests cannot make (a peer the daemon
// may not inspect) can be tested.
[[nodiscard]] absl::StatusOr<ClientIdentity> ResolveSeenClient(int claimed_pid,
                                                               uint64_t claimed_namespace,
                                                               int peer_pid,
                                                               const ProcessView& peer,
                                                               const ProcessView& own);

}  // namespace kiln::server
