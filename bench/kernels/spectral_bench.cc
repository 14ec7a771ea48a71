// Fourier transforms (spectral.cc): FNet's mixing (a 2-D transform over
// tokens and hidden of a complex copy of the activations), a real signal's
// one-sided transform, and a prime length (Bluestein). Items processed:
// complex values transformed per pass, summed over the passes.
#include "bench/kernels/one_node.h"

namespace {

using kiln::bench::OneNode;
using kiln::runtime::BoolArg;
using kiln::runtime::DType;
using kiln::runtime::IntArg;
using kiln::runtime::IntListArg;

// Args: batch, tokens, hidden; over dims (1, 2).
void BM_FftC2c2d(benchmark::State& state) {
  const int64_t b = state.range(0), t = state.range(1), h = state.range(2);
  OneNode node("aten._fft_c2c.default");
  auto x = node.Tensor({b, t, h}, false, -1, 1, DType::kC64);
  if (!node.Prepare({x, IntListArg({1, 2}), IntArg(0), BoolArg(true)}, state)) return;
  for (auto _ : state) {
    if (!node.Run(state)) break;
  }
  state.SetItemsProcessed(2 * b * t * h * state.iterations());
}
BENCHMARK(BM_FftC2c2d)
    ->ArgNames({"N", "T", "H"})
    ->Args({1, 512, 768})  // FNet base, batch 1
    ->Args({1, 128, 256})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Args: rows, length; the last dim, one-sided.
void BM_FftR2c(benchmark::State& state) {
  const int64_t rows = state.range(0), n = state.range(1);
  OneNode node("aten._fft_r2c.default");
  auto x = node.Tensor({rows, n}, false);
  if (!node.Prepare({x, IntListArg({1}), IntArg(0), BoolArg(true)}, state)) return;
  for (auto _ : state) {
    if (!node.Run(state)) break;
  }
  state.SetItemsProcessed(rows * n * state.iterations());
}
BENCHMARK(BM_FftR2c)
    ->ArgNames({"rows", "n"})
    ->Args({64, 4096})
    ->Args({64, 1009})  // a prime past the direct radices: Bluestein
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
