#include "server/peer_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

absl::StatusOr<PeerCredentials> CredentialsOf(int fd) {
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("SO_PEERCRED failed: ", std::strerror(errno)));
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

bool PeerAllowed(uid_t uid, uid_t own_uid) { return uid == own_uid; }

std::optional<int> InheritedListenSocket() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  int listen_pid = 0, listen_fds = 0;
  if (pid == nullptr || fds == nullptr || !absl::SimpleAtoi(pid, &listen_pid) ||
      !absl::SimpleAtoi(fds, &listen_fds) || listen_pid != getpid() || listen_fds < 1) {
    return std::nullopt;
  }
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  constexpr int kFirstPassedFd = 3;  // SD_LISTEN_FDS_START
  fcntl(kFirstPassedFd, F_SETFD, FD_CLOEXEC);
  return kFirstPassedFd;
}

absl::StatusOr<std::unique_ptr<PeerListener>> PeerListener::Bind(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path ", path, " is longer than ", sizeof(addr.sun_path) - 1, " bytes"));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  // Created 0600 from the start: no window in which another user could
  // connect (the directory is 0700 too).
  const mode_t old_mask = umask(0177);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  umask(old_mask);
  if (bound != 0 || listen(fd, SOMAXCONN) != 0) {
    const int err = bound != 0 ? bind_errno : errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", path, ": ", std::strerror(err)));
  }
  return std::unique_ptr<PeerListener>(new PeerListener(fd));
}

absl::StatusOr<std::unique_ptr<PeerListener>> PeerListener::Adopt(int fd) {
  int type = 0, listening = 0;
  socklen_t len = sizeof(type);
  sockaddr_storage addr{};
  socklen_t addr_len = sizeof(addr);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0 ||
      addr.ss_family != AF_UNIX) {
    return absl::InvalidArgumentError(
        absl::StrCat("inherited fd ", fd, " is not a unix stream socket"));
  }
  len = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    return absl::InvalidArgumentError(absl::StrCat("inherited fd ", fd, " is not listening"));
  }
  return std::unique_ptr<PeerListener>(new PeerListener(fd));
}

PeerListener::~PeerListener() {
  Stop();
  close(fd_);
}

void PeerListener::Start(grpc::Server* server) {
  if (pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this, server] { AcceptLoop(server); });
}

void PeerListener::Stop() {
  if (!thread_.joinable()) return;
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  thread_.join();
  for (int& w : wake_) {
    if (w >= 0) close(w);
    w = -1;
  }
}

void PeerListener::AcceptLoop(grpc::Server* server) {
  const uid_t own_uid = geteuid();
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, wake_[0] >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("listener: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      // EMFILE and friends: back off instead of spinning on the ready fd.
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        spdlog::warn("listener: accept failed: {}", std::strerror(errno));
        usleep(100 * 1000);
      }
      continue;
    }
    auto cred = CredentialsOf(conn);
    if (!cred.ok() || !PeerAllowed(cred->uid, own_uid)) {
      refused_.fetch_add(1);
      spdlog::warn("refused a connection from {} (the daemon serves uid {} only)",
                   cred.ok() ? absl::StrCat("uid ", cred->uid, " pid ", cred->pid)
                             : std::string(cred.status().message()),
                   own_uid);
      close(conn);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      peers_[conn] = *cred;
    }
    spdlog::debug("connection fd {} from pid {}", conn, cred->pid);
    grpc::AddInsecureChannelFromFd(server, conn);
  }
}

std::optional<PeerCredentials> PeerListener::PeerOf(const std::string& peer) const {
  constexpr std::string_view kPrefix = "fd:";
  int fd = -1;
  if (peer.compare(0, kPrefix.size(), kPrefix) != 0 ||
      !absl::SimpleAtoi(peer.substr(kPrefix.size()), &fd)) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

}  // namespace kiln::server
