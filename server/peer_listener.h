// The daemon's unix-socket listener. kilnd accepts connections itself,
// rather than letting gRPC listen, so that every peer's credentials
// (SO_PEERCRED: uid and pid as the kernel knows them) are checked before
// gRPC reads a byte: a process of another user is refused on connect. An
// accepted connection is handed to the gRPC server as a channel of its own
// (grpc::AddInsecureChannelFromFd), whose calls report the peer "fd:<N>";
// PeerOf() maps that back to the credentials, so OpenSession can hold a
// client to the pid it claims.
//
// The listening socket is either bound here (0600, inside the 0700
// directory SocketLock prepared) or inherited from a service manager
// (systemd socket activation: LISTEN_FDS / LISTEN_PID, first fd 3).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace grpc {
class Server;
}

namespace kiln::server {

struct PeerCredentials {
  pid_t pid = 0;  // 0 when the peer's pid is not visible from here
  uid_t uid = 0;
  gid_t gid = 0;
};

// The credentials of the connected unix socket `fd` (SO_PEERCRED).
absl::StatusOr<PeerCredentials> CredentialsOf(int fd);

// Whether a peer with `uid` may connect to a daemon running as `own_uid`:
// the same user only (root's daemon, too, serves only root).
bool PeerAllowed(uid_t uid, uid_t own_uid);

// The listening socket systemd passed (LISTEN_PID is us, LISTEN_FDS >= 1):
// fd 3, else nullopt. Clears the variables so children do not inherit them.
std::optional<int> InheritedListenSocket();

class PeerListener {
 public:
  // Binds and listens on `path` (mode 0600).
  static absl::StatusOr<std::unique_ptr<PeerListener>> Bind(const std::string& path);
  // Takes over a listening unix socket (checked to be one).
  static absl::StatusOr<std::unique_ptr<PeerListener>> Adopt(int fd);
  ~PeerListener();

  // Accepts connections on a thread of its own and adds the allowed ones
  // to `server` until Stop().
  void Start(grpc::Server* server);
  // Stops accepting (connections already handed over stay). Idempotent.
  void Stop();

  // The credentials behind a call's peer string ("fd:<N>"); nullopt for a
  // peer this listener did not accept (TCP, in-process).
  std::optional<PeerCredentials> PeerOf(const std::string& peer) const;
  // Connections refused so far (another user's).
  uint64_t refused() const { return refused_.load(); }

 private:
  explicit PeerListener(int fd) : fd_(fd) {}
  void AcceptLoop(grpc::Server* server);

  const int fd_;
  int wake_[2] = {-1, -1};  // Stop() writes here to end the poll
  std::thread thread_;
  std::atomic<uint64_t> refused_{0};
  mutable absl::Mutex mu_;
  // By fd number. A number is reused after gRPC closes a connection; the
  // entry is overwritten at the next accept, before gRPC sees the new one.
  absl::flat_hash_map<int, PeerCredentials> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
