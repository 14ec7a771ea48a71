#include "server/session_hold.h"

#include <utility>
#include <vector>

namespace kiln::server {

HoldReactor::HoldReactor(HoldBoard* board, std::function<void()> on_lost)
    : board_(board), on_lost_(std::move(on_lost)) {}

void HoldReactor::End(const grpc::Status& status) {
  if (!ended_.exchange(true)) Finish(status);
}

void HoldReactor::OnCancel() {
  // Only a loss if the daemon had not ended the call itself (a shutdown's
  // End followed by the client hanging up is not one).
  if (ended_.exchange(true)) return;
  if (on_lost_) on_lost_();
  Finish(grpc::Status::CANCELLED);
}

void HoldReactor::OnDone() {
  board_->Forget(this);
  Unref();
}

void HoldReactor::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

bool HoldBoard::Add(HoldReactor* hold) {
  absl::MutexLock lock(&mu_);
  if (closed_) return false;
  holds_.insert(hold);
  return true;
}

void HoldBoard::Forget(HoldReactor* hold) {
  absl::MutexLock lock(&mu_);
  holds_.erase(hold);
}

void HoldBoard::EndAll(const grpc::Status& status) {
  std::vector<HoldReactor*> open;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (HoldReactor* h : holds_) {
      h->Ref();  // OnDone may run as soon as the lock is released
      open.push_back(h);
    }
  }
  // Outside the lock: Finish may run OnDone, which takes it, on this thread.
  for (HoldReactor* h : open) {
    h->End(status);
    h->Unref();
  }
}

size_t HoldBoard::size() const {
  absl::MutexLock lock(&mu_);
  return holds_.size();
}

}  // namespace kiln::server
