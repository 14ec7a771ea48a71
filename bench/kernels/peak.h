// The machine's measured fp32 peak, for kernel benchmarks to report their
// GFLOP/s against (defined in fma_peak_bench.cc, which also benchmarks it).
#pragma once

namespace kiln::bench {

// GFLOP/s of an FMA-only loop (AVX-512 where the CPU has it, else AVX2+FMA)
// on `threads` threads at once; 0 means all hardware threads. Measured on
// the first call for each thread count and remembered.
double MeasuredPeakGflops(int threads = 0);

}  // namespace kiln::bench
