// The only door from kernels to threads. Kernels describe work as a range
// and a grain; the implementation (parallel.cc) hands it to oneTBB inside
// whatever task arena the executor entered.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln::runtime {

// Calls fn(begin, end) on disjoint chunks covering [0, n), each of at least
// `grain` iterations except possibly the last. fn must not throw.
void ParallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn);

// How many threads may run chunks of a ParallelFor called here at once: the
// concurrency of the task arena the caller is in. Kernels are prepared in
// the arena their executions use (see RunLikeExecution), so a kernel sizes
// per-worker scratch by MaxWorkers() when it is prepared.
int MaxWorkers();

// Which of those threads the caller is, in [0, MaxWorkers()): inside a
// ParallelFor body no other thread of the same ParallelFor has the same
// index at the same time (a body never waits for other tasks).
int WorkerIndex();

}  // namespace kiln::runtime
