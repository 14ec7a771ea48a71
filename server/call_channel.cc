#include "server/call_channel.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/call_channel_layout.h"
#include "server/futex.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

// How long the thread sleeps before re-checking whether it should stop: the
// bound on a Stop() that races with the thread going to sleep.
constexpr std::chrono::milliseconds kWakeInterval{100};

// After a call, how long the thread watches the word before sleeping: a
// client calling in a loop posts its next call within tens of microseconds,
// and catching it awake saves a futex wake-up (tens of microseconds on a
// VM) per call. Short, so an idle channel costs next to nothing.
constexpr std::chrono::microseconds kSpinAfterCall{50};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Channels serving a call, and channels spinning after one, in this
// process: a thread spins only when the daemon is otherwise idle, so with
// several clients spinning never takes a core a call (or a client) needs.
std::atomic<int> g_serving{0};
std::atomic<int> g_spinning{0};

}  // namespace

absl::StatusOr<std::unique_ptr<CallChannel>> CallChannel::Start(std::shared_ptr<ShmRegion> block,
                                                                ChannelRunner runner) {
  const uint64_t size = block->size();
  if (size < kMinChannelBytes || size > kMaxChannelBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a call channel block must hold between ",
                                                   kMinChannelBytes, " and ", kMaxChannelBytes,
                                                   " bytes; region '", block->name(), "' has ",
                                                   size));
  }
  auto base = block->Resolve(0, size);
  if (!base.ok()) return base.status();
  const uint32_t magic = ReadField<uint32_t>(*base, kChannelMagicOffset);
  const uint32_t version = ReadField<uint32_t>(*base, kChannelVersionOffset);
  if (magic != kChannelMagic || version != kChannelLayoutVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region '", block->name(), "' is not a call channel block of layout version ",
        kChannelLayoutVersion, " (magic ", magic, ", version ", version, ")"));
  }
  return std::unique_ptr<CallChannel>(new CallChannel(std::move(block), *base, std::move(runner)));
}

CallChannel::CallChannel(std::shared_ptr<ShmRegion> block, uint8_t* base, ChannelRunner runner)
    : block_(std::move(block)),
      base_(base),
      slots_(ChannelSlots(block_->size())),
      runner_(std::move(runner)) {
  StoreRelease(word(kChannelClosedOffset), 0);
  thread_ = std::thread([this] { Loop(); });
}

CallChannel::~CallChannel() { Stop(); }

void CallChannel::RequestStop() {
  stop_.store(true);
  FutexWakeAll(word(kChannelStateOffset));
}

void CallChannel::Join() {
  if (thread_.joinable()) thread_.join();
}

void CallChannel::Loop() {
  uint32_t* state = word(kChannelStateOffset);
  // A block that shrank under the daemon is zeros from then on
  // (client_memory_guard.h): nothing can be posted in it any more.
  while (!stop_.load() && !block_->broken()) {
    const uint32_t s = LoadAcquire(state);
    if (s == kChannelRequest) {
      if (CompareExchange(state, kChannelRequest, kChannelRunning)) {
        g_serving.fetch_add(1);
        const bool client_next = Serve();
        g_serving.fetch_sub(1);
        if (!client_next) SpinForNextCall(state);
      }
      continue;
    }
    // Whatever else the word holds (the client's business, or garbage), wait
    // for it to change: a client cannot make this thread spin.
    FutexWait(state, s, kWakeInterval);
  }
  // A call posted but not claimed gets an answer rather than silence.
  if (CompareExchange(state, kChannelRequest, kChannelRunning)) {
    Reply(ReadField<uint64_t>(base_, kRequestSeqOffset),
          absl::UnavailableError("kilnd is shutting down"), 0);
  }
  StoreRelease(word(kChannelClosedOffset), 1);
  FutexWakeAll(state);
  if (absl::Status broken = block_->Check(); !broken.ok()) {
    spdlog::warn("call channel stopped: {}", std::string(broken.message()));
  }
}

void CallChannel::SpinForNextCall(const uint32_t* state) {
  int none = 0;
  if (g_serving.load() != 0 || !g_spinning.compare_exchange_strong(none, 1)) return;
  const auto until = std::chrono::steady_clock::now() + kSpinAfterCall;
  while (LoadAcquire(state) != kChannelRequest && g_serving.load(std::memory_order_relaxed) == 0 &&
         !stop_.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < until) {
    CpuRelax();
  }
  g_spinning.store(0);
}

bool CallChannel::Serve() {
  const auto start = std::chrono::steady_clock::now();
  // Copy the request out first: the client may scribble on the block while
  // the call runs, and nothing checked may change under us.
  const uint64_t seq = ReadField<uint64_t>(base_, kRequestSeqOffset);
  ChannelCall call;
  call.handle = ReadField<uint64_t>(base_, kRequestHandleOffset);
  call.flags = ReadField<uint32_t>(base_, kRequestFlagsOffset);
  const uint64_t n_in = ReadField<uint32_t>(base_, kRequestInputsOffset);
  const uint64_t n_out = ReadField<uint32_t>(base_, kRequestOutputsOffset);
  absl::Status status;
  if (n_in > slots_ || n_out > slots_ - n_in) {
    status = absl::InvalidArgumentError(absl::StrCat("the call names ", n_in, " inputs and ",
                                                     n_out, " outputs; the channel holds ",
                                                     slots_, " tensors"));
  } else {
    auto slot = [&](uint64_t i) {
      const uint64_t at = kSlotsOffset + i * kSlotBytes;
      return TensorSlot{ReadField<uint64_t>(base_, at), ReadField<uint64_t>(base_, at + 8),
                        ReadField<uint64_t>(base_, at + 16)};
    };
    for (uint64_t i = 0; i < n_in; ++i) call.inputs.push_back(slot(i));
    for (uint64_t i = 0; i < n_out; ++i) call.outputs.push_back(slot(n_in + i));
    status = runner_(call);
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  Reply(seq, status,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  return (call.flags & kRequestFlagClientComputesNext) != 0;
}

void CallChannel::Reply(uint64_t seq, const absl::Status& status, double run_us) {
  WriteField<uint64_t>(base_, kReplySeqOffset, seq);
  WriteField<int32_t>(base_, kReplyCodeOffset, static_cast<int32_t>(status.code()));
  const uint64_t n = std::min<uint64_t>(status.message().size(), kReplyMessageCapacity);
  if (n > 0) std::memcpy(base_ + kReplyMessageOffset, status.message().data(), n);
  WriteField<uint32_t>(base_, kReplyMessageBytesOffset, static_cast<uint32_t>(n));
  WriteField<double>(base_, kReplyRunUsOffset, run_us);
  StoreRelease(word(kChannelStateOffset), kChannelReply);
  FutexWakeAll(word(kChannelStateOffset));
}

}  // namespace kiln::server
