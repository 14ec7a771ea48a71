// CallChannel: a daemon thread serving the Execute calls a client posts in
// its call channel block (layout and handshake: call_channel_layout.h).
//
// The thread sleeps on the block's futex word between calls, copies each
// request out of shared memory, hands it to the runner (which resolves and
// runs it exactly like the Execute RPC) and writes the reply back. Stop()
// lets a call in progress finish, answers a posted one with UNAVAILABLE,
// marks the block closed and joins the thread.
//
// Thread-safety: Stop() may be called from any thread but the channel's own
// (the runner must not stop its own channel).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/shm_region.h"

namespace kiln::server {

// One tensor of a posted call: bytes [offset, offset + byte_size) of a
// region of the client's session. Unchecked until the runner resolves it.
struct TensorSlot {
  uint64_t region_id = 0;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// A request copied out of the block.
struct ChannelCall {
  uint64_t handle = 0;
  uint32_t flags = 0;  // kRequestFlag* bits
  std::vector<TensorSlot> inputs;
  std::vector<TensorSlot> outputs;
};

using ChannelRunner = std::function<absl::Status(const ChannelCall&)>;

class CallChannel {
 public:
  // Serves the block at the start of `block` (the whole region). 
  // INVALID_ARGUMENT when the region's size is outside [kMinChannelBytes,
  // kMaxChannelBytes] or the header's magic or layout version is wrong.
  static absl::StatusOr<std::unique_ptr<CallChannel>> Start(std::shared_ptr<ShmRegion> block,
                                                            ChannelRunner runner);
  ~CallChannel();
  CallChannel(const CallChannel&) = delete;
  CallChannel& operator=(const CallChannel&) = delete;

  // Asks the thread to stop; returns at once. Join() waits for it.
  void RequestStop();
  void Join();
  void Stop() {
    RequestStop();
    Join();
  }

  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }
  // Inputs plus outputs one call may carry.
  uint64_t slots() const { return slots_; }

 private:
  CallChannel(std::shared_ptr<ShmRegion> block, uint8_t* base, ChannelRunner runner);
  void Loop();
  // Runs the posted call and replies; whether the client said it computes
  // next (then this thread sleeps at once rather than spinning).
  bool Serve();
  void SpinForNextCall(const uint32_t* state);
  void Reply(uint64_t seq, const absl::Status& status, double run_us);
  uint32_t* word(uint64_t offset) const { return reinterpret_cast<uint32_t*>(base_ + offset); }

  const std::shared_ptr<ShmRegion> block_;
  uint8_t* const base_;
  const uint64_t slots_;
  const ChannelRunner runner_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> calls_{0};
  std::thread thread_;
};

}  // namespace kiln::server
