// Who a client is: its claimed pid held against the kernel's whatever pid
// namespace it claims, a container's client checked against its pid in its
// own namespace, claims the kernel cannot check taken but never watched.
#include "server/client_identity.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "server/process_watch.h"

namespace kiln::server {
namespace {

PeerCredentials Peer(pid_t pid) { return PeerCredentials{pid, geteuid(), getegid()}; }

TEST(ClientIdentityTest, OwnPidInTheDaemonsNamespaceIsWatched) {
  const uint64_t own = OwnPidNamespace();
  for (uint64_t claimed_ns : {own, uint64_t{0}}) {
    auto id = ResolveClientIdentity(getpid(), claimed_ns, Peer(getpid()), own);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(id->pid, getpid());
    EXPECT_EQ(id->watch, getpid());
  }
  // A client that does not say its pid is taken for what the kernel says.
  auto unsaid = ResolveClientIdentity(0, 0, Peer(getpid()), own);
  ASSERT_TRUE(unsaid.ok()) << unsaid.status();
  EXPECT_EQ(unsaid->pid, getpid());
}

TEST(ClientIdentityTest, AnotherPidIsRefusedWhateverNamespaceIsClaimed) {
  const uint64_t own = OwnPidNamespace();
  // Namespace 0 ("unknown") and a made-up one skipped the check before.
  for (uint64_t claimed_ns : {own, uint64_t{0}, own + 12345}) {
    auto id = ResolveClientIdentity(getppid(), claimed_ns, Peer(getpid()), own);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied) << claimed_ns;
  }
  auto id = ResolveClientIdentity(getppid(), 0, Peer(getpid()), own);
  EXPECT_NE(id.status().message().find("connection is from pid " + std::to_string(getpid())),
            std::string::npos)
      << id.status();
}

TEST(ClientIdentityTest, AWrongNamespaceClaimIsRefusedEvenWithTheRightPid) {
  const uint64_t own = OwnPidNamespace();
  auto id = ResolveClientIdentity(getpid(), own + 1, Peer(getpid()), own);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(id.status().message().find("pid namespace"), std::string::npos) << id.status();
}

TEST(ClientIdentityTest, NegativePidIsInvalid) {
  EXPECT_EQ(ResolveClientIdentity(-5, 0, Peer(getpid()), OwnPidNamespace()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveClientIdentity(-5, 0, std::nullopt, OwnPidNamespace()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClientIdentityTest, TcpClaimsAreTakenButNeverWatched) {
  const uint64_t own = OwnPidNamespace();
  auto id = ResolveClientIdentity(4242, own, std::nullopt, own);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pid, 4242);
  EXPECT_FALSE(id->watch.has_value());
}

TEST(ClientIdentityTest, APeerOutsideTheDaemonsViewCannotClaimItsNamespace) {
  // The kernel reports pid 0 for a peer in a namespace the daemon does not
  // see into (the daemon is the one in a container).
  const uint64_t own = OwnPidNamespace();
  EXPECT_EQ(ResolveClientIdentity(7, own, Peer(0), own).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto id = ResolveClientIdentity(7, own + 1, Peer(0), own);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pid, 7);
  EXPECT_FALSE(id->watch.has_value());
}

TEST(ClientIdentityTest, APeerThatIsGoneIsRefused) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  auto id = ResolveClientIdentity(child, 0, Peer(child), OwnPidNamespace());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied) << id.status();
}

// A process in a pid namespace of its own, nested in ours (a container's
// client beside a daemon on the host): its pid there is 1.
class NestedNamespaceProcess {
 public:
  NestedNamespaceProcess() {
    int report[2], release[2];
    if (pipe(report) != 0 || pipe(release) != 0) return;
    middle_ = fork();
    if (middle_ == 0) {
      // Only async-signal-safe calls between fork and _exit.
      close(report[0]);
      close(release[1]);
      pid_t inner = -1;
      if (unshare(CLONE_NEWPID) == 0) {
        inner = fork();
        if (inner == 0) {
          char byte;
          (void)!read(release[0], &byte, 1);  // until the test is done
          _exit(0);
        }
      }
      (void)!write(report[1], &inner, sizeof(inner));
      if (inner > 0) waitpid(inner, nullptr, 0);
      _exit(0);
    }
    close(report[1]);
    close(release[0]);
    release_ = release[1];
    if (middle_ < 0 || read(report[0], &inner_, sizeof(inner_)) != sizeof(inner_)) inner_ = -1;
    close(report[0]);
  }
  ~NestedNamespaceProcess() {
    if (release_ >= 0) close(release_);  // the inner process reads end of file and exits
    if (middle_ > 0) waitpid(middle_, nullptr, 0);
  }
  // The process as the daemon sees it; <= 0 when no namespace could be made.
  pid_t pid() const { return inner_; }

 private:
  pid_t middle_ = -1;
  pid_t inner_ = -1;
  int release_ = -1;
};

TEST(ClientIdentityTest, AClientInANestedNamespaceIsHeldToItsOwnPid) {
  NestedNamespaceProcess nested;
  if (nested.pid() <= 0) GTEST_SKIP() << "cannot make a pid namespace (needs CAP_SYS_ADMIN)";
  const uint64_t own = OwnPidNamespace();
  auto its_namespace = PidNamespaceOf(nested.pid());
  ASSERT_TRUE(its_namespace.ok()) << its_namespace.status();
  EXPECT_NE(*its_namespace, own);
  auto pids = NamespacePids(nested.pid());
  ASSERT_TRUE(pids.ok()) << pids.status();
  ASSERT_EQ(pids->size(), NamespacePids(getpid())->size() + 1);
  EXPECT_EQ(pids->front(), nested.pid());
  EXPECT_EQ(pids->back(), 1);

  for (uint64_t claimed_ns : {*its_namespace, uint64_t{0}}) {
    auto id = ResolveClientIdentity(1, claimed_ns, Peer(nested.pid()), own);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(id->pid, 1);
    EXPECT_EQ(id->watch, nested.pid());  // the daemon sees it: no Hold needed
  }
  // Another pid of its namespace, or its pid as the daemon sees it.
  for (int claimed : {2, static_cast<int>(nested.pid())}) {
    auto id = ResolveClientIdentity(claimed, 0, Peer(nested.pid()), own);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied) << claimed;
  }
  // Nor may it say it is in the daemon's namespace.
  EXPECT_EQ(ResolveClientIdentity(1, own, Peer(nested.pid()), own).status().code(),
            absl::StatusCode::kPermissionDenied);
}

// Where the kernel will not let the daemon read a peer's /proc/<pid>/ns/pid
// (a confined daemon, a non-dumpable client), the NSpid lists decide: the
// same length is the daemon's namespace, a longer one a nested namespace.
TEST(ClientIdentityTest, WithoutTheNamespaceInodeTheNSpidDepthDecides) {
  const ProcessView daemon{uint64_t{1000}, {1}};
  const ProcessView alongside{std::nullopt, {4242}};
  const ProcessView nested{std::nullopt, {4243, 7}};
  auto id = ResolveSeenClient(4242, 0, 4242, alongside, daemon);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pid, 4242);
  EXPECT_EQ(id->watch, 4242);
  EXPECT_EQ(ResolveSeenClient(4000, 0, 4242, alongside, daemon).status().code(),
            absl::StatusCode::kPermissionDenied);
  // In the daemon's namespace, claiming another is a lie, and vice versa.
  EXPECT_TRUE(ResolveSeenClient(4242, 1000, 4242, alongside, daemon).ok());
  EXPECT_EQ(ResolveSeenClient(4242, 1001, 4242, alongside, daemon).status().code(),
            absl::StatusCode::kPermissionDenied);

  auto inner = ResolveSeenClient(7, 0, 4243, nested, daemon);
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(inner->pid, 7);
  EXPECT_EQ(inner->watch, 4243);
  for (int claimed : {8, 4243}) {
    EXPECT_EQ(ResolveSeenClient(claimed, 0, 4243, nested, daemon).status().code(),
              absl::StatusCode::kPermissionDenied)
        << claimed;
  }
  EXPECT_EQ(ResolveSeenClient(7, 1000, 4243, nested, daemon).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(ResolveSeenClient(7, 2000, 4243, nested, daemon).ok());  // cannot be told apart

  // Neither the inode nor the daemon's own NSpid: nothing to decide with.
  const ProcessView blind{uint64_t{1000}, {}};
  EXPECT_EQ(ResolveSeenClient(4242, 0, 4242, alongside, blind).status().code(),
            absl::StatusCode::kPermissionDenied);
  // No NSpid for the peer: its own pid is unknown.
  EXPECT_EQ(ResolveSeenClient(4242, 0, 4242, ProcessView{uint64_t{1000}, {}}, daemon)
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace kiln::server
