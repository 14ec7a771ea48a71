// Hold calls: how the daemon learns that a client it cannot watch has gone.
//
// A client in another pid namespace (a pod next to the DaemonSet's kilnd, a
// container beside the daemon's) has no pid the daemon can look up, and
// nothing vouches for the pid a TCP client names (client_identity.h), so
// the process watch (process_watch.h) cannot close its session when it dies.
// Such a client keeps one Hold call open for its lifetime instead. When the
// process dies the kernel closes its connection, gRPC cancels the call, and
// the reactor reports the loss; the service then closes the session as it
// would for an exited process.
#pragma once

#include <atomic>
#include <functional>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "kiln/v1/kiln.grpc.pb.h"

namespace kiln::server {

class HoldBoard;

// One Hold call. Lives until gRPC's OnDone and until the board lets go of
// it (reference counted: the board's shutdown may be ending it just then).
class HoldReactor final : public grpc::ServerWriteReactor<kiln::v1::HoldResponse> {
 public:
  // `on_lost` runs once, on a gRPC thread, if the call is cancelled (the
  // client's connection closed) before the daemon ended it.
  HoldReactor(HoldBoard* board, std::function<void()> on_lost);

  // Ends the call with `status` unless it has ended already.
  void End(const grpc::Status& status);

  void OnCancel() override;
  void OnDone() override;

 private:
  friend class HoldBoard;
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();

  HoldBoard* board_;
  std::function<void()> on_lost_;
  std::atomic<bool> ended_{false};
  std::atomic<int> refs_{1};  // gRPC's, dropped in OnDone
};

// The open Hold calls, so that shutdown can end them: gRPC's server waits
// for every call before it stops.
class HoldBoard {
 public:
  // False (and the call is not kept) once EndAll has run.
  bool Add(HoldReactor* hold);
  void Forget(HoldReactor* hold);
  // Ends every open call with `status`; later Adds fail.
  void EndAll(const grpc::Status& status);
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<HoldReactor*> holds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
