// Scratch memory of each thread working on one kernel run, carved out of the
// run's scratch (KernelContext::scratch) so that the memory plan counts it.
//
// A kernel keeps a WorkerScratch made when it is prepared: MaxWorkers()
// slices of the requested size, one per thread of the arena its executions
// run in. Run() checks that its arena is no wider (CheckArena), and inside
// a ParallelFor body each thread takes the slice of its WorkerIndex().
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"

namespace kiln::runtime {

class WorkerScratch {
 public:
  WorkerScratch() = default;
  // `bytes` per worker, placed from `offset` in the run's scratch (a
  // multiple of 64); no slices at all for 0 bytes.
  WorkerScratch(size_t offset, size_t bytes)
      : begin_(offset),
        stride_(bytes == 0 ? 0 : (bytes + kAlign - 1) / kAlign * kAlign + kSkew),
        workers_(MaxWorkers()) {}

  // Bytes of run scratch the slices take, from the offset given.
  size_t Bytes() const { return stride_ == 0 ? 0 : kSkew + stride_ * static_cast<size_t>(workers_); }
  // End of the slices in the run's scratch: the kernel's ScratchBytes().
  size_t End() const { return begin_ + Bytes(); }

  // INTERNAL when the calling arena has more threads than there are slices
  // (a kernel run outside the arena it was prepared for).
  absl::Status CheckArena() const {
    if (stride_ == 0 || MaxWorkers() <= workers_) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("kernel prepared for ", workers_,
                                            " threads runs in an arena of ", MaxWorkers()));
  }

  // The calling thread's slice (call inside a ParallelFor body).
  template <typename T>
  T* Mine(void* run_scratch) const {
    return reinterpret_cast<T*>(static_cast<char*>(run_scratch) + begin_ + kSkew +
                                stride_ * static_cast<size_t>(WorkerIndex()));
  }

 private:
  static constexpr size_t kAlign = 64;
  // Slices start this far past the offset given and lie this far apart
  // beyond their size. A kernel's other scratch is often a large power of
  // two long, and buffers a large power of two apart map to the same cache
  // sets: a thread reading one and writing the other evicts its own lines.
  // 17 cache lines move the slices to other sets.
  static constexpr size_t kSkew = 17 * kAlign;

  size_t begin_ = 0, stride_ = 0;
  int workers_ = 0;
};

}  // namespace kiln::runtime
