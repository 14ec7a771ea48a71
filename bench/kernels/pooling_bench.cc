// Max pooling over channels-last activations (kiln.max_pool2d_nhwc), the
// form the layout pass gives every max pool between convolutions: dense
// NHWC, or the 8-channel blocked layout seen as N * C/8 images of 8
// channels. Bytes processed: the input read once and the output written.
#include "bench/kernels/one_node.h"

namespace {

using kiln::bench::OneNode;
using kiln::runtime::BoolArg;
using kiln::runtime::IntListArg;

// Args: images, H (= W), C, kernel, stride, padding, ceil_mode.
void BM_MaxPoolNhwc(benchmark::State& state) {
  const int64_t n = state.range(0), h = state.range(1), c = state.range(2), k = state.range(3),
                s = state.range(4), p = state.range(5);
  OneNode node("kiln.max_pool2d_nhwc");
  auto x = node.Tensor({n, h, h, c}, false);
  if (!node.Prepare({x, IntListArg({k, k}), IntListArg({s, s}), IntListArg({p, p}),
                     IntListArg({1, 1}), BoolArg(state.range(6) != 0)},
                    state)) {
    return;
  }
  for (auto _ : state) {
    if (!node.Run(state)) break;
  }
  const int64_t oh = (h + 2 * p - k + (state.range(6) ? s - 1 : 0)) / s + 1;
  state.SetBytesProcessed(4 * (n * h * h * c + n * oh * oh * c) * state.iterations());
}
BENCHMARK(BM_MaxPoolNhwc)
    ->ArgNames({"N", "H", "C", "k", "s", "p", "ceil"})
    ->Args({8, 111, 8, 3, 2, 0, 1})   // squeezenet1_1 first pool, blocked
    ->Args({16, 55, 8, 3, 2, 0, 1})   // squeezenet1_1 second pool, blocked
    ->Args({8, 112, 8, 3, 2, 1, 0})   // resnet stem pool, blocked
    ->Args({1, 112, 64, 3, 2, 1, 0})  // resnet stem pool, NHWC
    ->Args({8, 112, 64, 3, 2, 1, 0})  // resnet stem pool, NHWC, batch 8
    ->Args({1, 224, 64, 2, 2, 0, 0})  // vgg16 first pool, NHWC
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
