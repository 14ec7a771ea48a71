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

}  // namespace kiln::runtime
