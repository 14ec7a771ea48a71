// The fp32 peak of this machine: a loop of independent vector FMAs, on one
// thread and on all of them, reported as GFLOP/s. Kernel benchmarks compare
// themselves with it (peak.h). The AVX-512 variant is compiled for AVX-512
// through a function attribute and skipped on CPUs without it, so the
// binary still runs everywhere -march=x86-64-v3 does.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/kernels/peak.h"
#include "benchmark/benchmark.h"

namespace kiln::bench {
namespace {

// Enough independent accumulators to cover FMA latency times the number of
// FMA pipes (4 cycles x 2 on current cores), so the loop is throughput-bound,
// and few enough that they and the two constants stay in registers: AVX2
// has 16 vector registers, and with 16 chains there it spilled one a round
// and measured far below the peak (linear layers then ran above "peak").
constexpr int kChainsAvx512 = 16;
constexpr int kChainsAvx2 = 12;
constexpr int64_t kInner = 1 << 14;  // iterations per call

// The multiplier and addend keep every chain bounded and away from
// denormals; without -ffast-math the compiler may not merge or reorder the
// FMAs of a chain. Callers hide `n` from the optimizer (DoNotOptimize):
// these functions are pure, so a constant argument would let the call be
// hoisted out of the timing loop.
__attribute__((target("avx512f"))) float FmaLoopAvx512(int64_t n) {
  __m512 acc[kChainsAvx512];
  for (int j = 0; j < kChainsAvx512; ++j) acc[j] = _mm512_set1_ps(1.0f + j);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < kChainsAvx512; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  __m512 sum = acc[0];
  for (int j = 1; j < kChainsAvx512; ++j) sum = _mm512_add_ps(sum, acc[j]);
  // Not _mm512_reduce_add_ps: GCC 12's version warns (-Wuninitialized).
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

float FmaLoopAvx2(int64_t n) {
  __m256 acc[kChainsAvx2];
  for (int j = 0; j < kChainsAvx2; ++j) acc[j] = _mm256_set1_ps(1.0f + j);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < kChainsAvx2; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 sum = acc[0];
  for (int j = 1; j < kChainsAvx2; ++j) sum = _mm256_add_ps(sum, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

bool HasAvx512() { return __builtin_cpu_supports("avx512f"); }

// Flops of one FmaLoop*(n) call: chains x lanes x 2 (multiply and add).
double FlopsPerCall(bool avx512, int64_t n) {
  return 2.0 * (avx512 ? kChainsAvx512 * 16 : kChainsAvx2 * 8) * static_cast<double>(n);
}

void RunFmaBenchmark(benchmark::State& state, bool avx512) {
  if (avx512 && !HasAvx512()) {
    state.SkipWithError("this CPU has no AVX-512");
    return;
  }
  for (auto _ : state) {
    int64_t n = kInner;
    benchmark::DoNotOptimize(n);
    benchmark::DoNotOptimize(avx512 ? FmaLoopAvx512(n) : FmaLoopAvx2(n));
  }
  // Per thread; the library sums counters over threads and, with
  // UseRealTime, divides by wall time: the all-threads row is the total.
  state.counters["GFLOPS"] = benchmark::Counter(
      FlopsPerCall(avx512, kInner) * state.iterations(), benchmark::Counter::kIsRate,
      benchmark::Counter::kIs1000);
}

void BM_FmaPeakAvx512(benchmark::State& state) { RunFmaBenchmark(state, true); }
void BM_FmaPeakAvx2(benchmark::State& state) { RunFmaBenchmark(state, false); }

int AllThreads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

BENCHMARK(BM_FmaPeakAvx512)->Threads(1)->Threads(AllThreads())->UseRealTime();
BENCHMARK(BM_FmaPeakAvx2)->Threads(1)->Threads(AllThreads())->UseRealTime();

}  // namespace

double MeasuredPeakGflops(int threads) {
  static std::mutex mu;
  static std::map<int, double> measured;
  if (threads <= 0) threads = AllThreads();
  std::lock_guard<std::mutex> lock(mu);
  auto it = measured.find(threads);
  if (it != measured.end()) return it->second;

  const bool avx512 = HasAvx512();
  const int64_t n = 1 << 23;  // long enough that starting threads is noise
  auto loop = [avx512](int64_t iters) {
    benchmark::DoNotOptimize(iters);
    benchmark::DoNotOptimize(avx512 ? FmaLoopAvx512(iters) : FmaLoopAvx2(iters));
  };
  // Benchmark-only threads: this measures the hardware, not the runtime,
  // so it does not go through the executor's arena. The best of three
  // rounds: the first also wakes the cores up (frequency, a virtual CPU
  // that was idle), which on small VMs cost a third of the figure.
  double gflops = 0;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) workers.emplace_back(loop, n);
    for (std::thread& w : workers) w.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gflops = std::max(gflops, FlopsPerCall(avx512, n) * threads / seconds / 1e9);
  }
  measured[threads] = gflops;
  return gflops;
}

}  // namespace kiln::bench
