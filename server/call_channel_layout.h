// The byte layout of a call channel: a block of client shared memory through
// which Execute calls travel without gRPC (a futex handshake costs a few
// microseconds; a gRPC call from Python several hundred).
//
// The client creates a region (RegisterRegion), lays out the block below,
// and asks for a channel over it (OpenChannel); a daemon thread then serves
// the calls posted in it. Every field is little-endian, at a fixed offset.
// This header is the one definition: the Python client's
// client/kiln/channel_layout.py mirrors its numbers, and
// tests/python/test_channel_layout.py fails when the two differ. Change
// both together and bump kChannelLayoutVersion.
//
//   offset  size  field
//        0     4  state        futex word, see ChannelState
//        4     4  closed       1 once the daemon no longer serves the block
//        8     4  magic        kChannelMagic, written by the client
//       12     4  version      kChannelLayoutVersion, written by the client
//       64     8  request.seq       echoed in reply.seq
//       72     8  request.handle    a handle of the client's session
//       80     4  request.inputs    number of input slots used
//       84     4  request.outputs   number of output slots used
//      128     8  reply.seq
//      136     4  reply.code        absl::StatusCode (0: ok)
//      140     4  reply.message_bytes
//      144     8  reply.run_us      daemon-side time of the call (double)
//      192   832  reply.message     error text, not NUL-terminated
//     1024  24*n  slots: inputs, then outputs; each {region_id, offset,
//                 byte_size} as three uint64; a tensor is dense and of the
//                 dtype and shape the compiled graph says
//
// The daemon treats the block as hostile: it copies the request out before
// validating it, checks every count and descriptor, and never waits on a
// value it did not read itself.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln::server {

// Who may write the block next:
//   kIdle    -> client writes a request, then kRequest (and wakes the daemon)
//   kRequest -> daemon claims it: kRunning
//   kRunning -> daemon writes the reply, then kReply (and wakes the client)
//   kReply   -> client reads the reply, then kIdle
enum ChannelState : uint32_t {
  kChannelIdle = 0,
  kChannelRequest = 1,
  kChannelRunning = 2,
  kChannelReply = 3,
};

inline constexpr uint32_t kChannelMagic = 0x314e484b;  // "KHN1"
inline constexpr uint32_t kChannelLayoutVersion = 1;

inline constexpr uint64_t kChannelStateOffset = 0;
inline constexpr uint64_t kChannelClosedOffset = 4;
inline constexpr uint64_t kChannelMagicOffset = 8;
inline constexpr uint64_t kChannelVersionOffset = 12;
inline constexpr uint64_t kRequestSeqOffset = 64;
inline constexpr uint64_t kRequestHandleOffset = 72;
inline constexpr uint64_t kRequestInputsOffset = 80;
inline constexpr uint64_t kRequestOutputsOffset = 84;
// uint32 request flags (a block starts zeroed: no flag set).
inline constexpr uint64_t kRequestFlagsOffset = 88;
// The client computes right after this call (eager nodes follow the
// partition): the daemon's threads sleep after the run instead of
// spinning for the next one, so they leave the cores to the client.
inline constexpr uint32_t kRequestFlagClientComputesNext = 1;
inline constexpr uint64_t kReplySeqOffset = 128;
inline constexpr uint64_t kReplyCodeOffset = 136;
inline constexpr uint64_t kReplyMessageBytesOffset = 140;
inline constexpr uint64_t kReplyRunUsOffset = 144;
inline constexpr uint64_t kReplyMessageOffset = 192;
inline constexpr uint64_t kReplyMessageCapacity = 832;
inline constexpr uint64_t kSlotsOffset = 1024;
inline constexpr uint64_t kSlotBytes = 24;

// Smallest and largest block the daemon accepts.
inline constexpr uint64_t kMinChannelBytes = 4096;
inline constexpr uint64_t kMaxChannelBytes = 1 << 20;

// A field of the block at `offset`, read or written through memcpy: the
// block is plain bytes shared with another process, not typed objects.
template <typename T>
T ReadField(const uint8_t* base, uint64_t offset) {
  T v;
  std::memcpy(&v, base + offset, sizeof(T));
  return v;
}

template <typename T>
void WriteField(uint8_t* base, uint64_t offset, T v) {
  std::memcpy(base + offset, &v, sizeof(T));
}

// Slots a block of `bytes` holds (inputs + outputs of one call).
inline constexpr uint64_t ChannelSlots(uint64_t bytes) {
  return bytes < kSlotsOffset ? 0 : (bytes - kSlotsOffset) / kSlotBytes;
}

}  // namespace kiln::server
