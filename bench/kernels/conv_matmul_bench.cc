// Kernel benchmarks: convolution (oneDNN, prepacked constant weights),
// linear and mm, at resnet18 / MLP sizes and at large (batch 8, BERT-base,
// square) shapes, plus the memory-bound ops between them. Each benchmark
// prepares one node through the op registry and times Run(). Compute-bound
// ones report GFLOPS (a rate counter) and pct_of_peak, their share of the
// fp32 peak measured by an FMA loop on all threads (fma_peak_bench.cc):
// kernels run in oneTBB's default arena, which also spans all threads.
// Every benchmark uses real time: the work runs on oneTBB's workers, so the
// calling thread's CPU time (the library's default clock for rates) would
// count only a fraction of it and inflate GFLOPS.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/kernels/one_node.h"
#include "bench/kernels/peak.h"
#include "benchmark/benchmark.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/ir/graph.h"
#include "runtime/ops/op_def.h"
#include "runtime/ops/registry.h"

namespace kiln::runtime {
namespace {

using kiln::bench::OneNode;

// The peak, measured while the process starts: measured lazily after a
// kernel has run, oneTBB's workers (which spin for a while after each
// parallel region) take a core from the FMA loop and halve the figure.
const double kPeakGflops = bench::MeasuredPeakGflops();

// Times the loop in `body` (the benchmark's `for (auto _ : state)`), then
// reports GFLOPS and pct_of_peak for flops_per_iteration per iteration.
template <typename Body>
void TimeFlops(benchmark::State& state, double flops_per_iteration, Body body) {
  const double peak = kPeakGflops;
  const auto t0 = std::chrono::steady_clock::now();
  body();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = flops_per_iteration * state.iterations();
  state.counters["GFLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1000);
  if (seconds > 0 && peak > 0) {
    state.counters["pct_of_peak"] = 100.0 * flops / seconds / 1e9 / peak;
  }
}

// Args: N, C_in, H (= W), C_out, kernel, stride.
void BM_Conv2d(benchmark::State& state) {
  const int64_t b = state.range(0), c = state.range(1), h = state.range(2),
                oc = state.range(3), k = state.range(4), s = state.range(5);
  OneNode n("aten.convolution.default");
  Arg x = n.Tensor({b, c, h, h}, false);
  Arg w = n.Tensor({oc, c, k, k}, true);
  Arg none;
  if (!n.Prepare({x, w, none, IntListArg({s, s}), IntListArg({k / 2, k / 2}),
                  IntListArg({1, 1}), BoolArg(false), IntListArg({0, 0}), IntArg(1)},
                 state)) {
    return;
  }
  const int64_t oh = (h + 2 * (k / 2) - k) / s + 1;
  TimeFlops(state, 2.0 * b * oc * oh * oh * c * k * k, [&] {
    for (auto _ : state) {
      if (!n.Run(state)) break;
    }
  });
}
BENCHMARK(BM_Conv2d)
    ->Args({1, 3, 224, 64, 7, 2})    // resnet18 conv1
    ->Args({1, 64, 56, 64, 3, 1})    // layer1
    ->Args({1, 128, 28, 128, 3, 1})  // layer2
    ->Args({1, 256, 14, 256, 3, 1})  // layer3
    ->Args({1, 512, 7, 512, 3, 1})   // layer4
    ->Args({1, 256, 14, 512, 1, 2})  // downsample
    // Large: batch 8 (the model benchmark's second batch size), vgg16.
    ->Args({8, 64, 56, 64, 3, 1})
    ->Args({8, 128, 28, 128, 3, 1})
    ->Args({8, 256, 14, 256, 3, 1})
    ->Args({8, 256, 56, 64, 1, 1})   // resnet50 bottleneck reduce
    ->Args({8, 64, 56, 256, 1, 1})   // resnet50 bottleneck expand
    ->Args({1, 256, 56, 256, 3, 1})  // vgg16 conv3
    ->Args({1, 8, 4, 8, 1, 1})       // next to no work: the per-call overhead
    // NF-Net-F0 at 192x192, stage 3: the block's 1x1 expand and reduce.
    ->Args({1, 768, 12, 1536, 1, 1})
    ->Args({1, 1536, 12, 768, 1, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// kiln.conv2d 3x3 stride 1 with bias, as the compiled models run it, in
// the given activation layouts. Args: layout_in, layout_out (0 plain NCHW,
// 1 channels-last), N, C_in, H (= W), C_out. GFLOPS counts a direct
// convolution's products, so the Winograd kernel (kernels/conv_winograd.h)
// shows as its speed-up over that; KILN_WINOGRAD=0 gives oneDNN's direct
// kernel for comparison.
void BM_Conv3x3(benchmark::State& state) {
  const int64_t in_layout = state.range(0), out_layout = state.range(1), b = state.range(2),
                c = state.range(3), h = state.range(4), oc = state.range(5);
  OneNode n("kiln.conv2d");
  Arg x = n.Tensor(in_layout == 1 ? std::vector<int64_t>{b, h, h, c}
                                  : std::vector<int64_t>{b, c, h, h},
                   false);
  Arg w = n.Tensor({oc, c, 3, 3}, true, -0.1f, 0.1f);
  Arg bias = n.Tensor({oc}, true);
  Arg none;
  if (!n.Prepare({x, w, bias, IntListArg({1, 1}), IntListArg({1, 1}), IntListArg({1, 1}),
                  IntArg(1), none, IntListArg({}), IntArg(in_layout), IntArg(out_layout)},
                 state)) {
    return;
  }
  TimeFlops(state, 2.0 * b * oc * h * h * c * 9, [&] {
    for (auto _ : state) {
      if (!n.Run(state)) break;
    }
  });
}
BENCHMARK(BM_Conv3x3)
    ->Args({1, 1, 1, 128, 32, 128})  // UNet (small) at 32x32 latents
    ->Args({0, 0, 1, 128, 32, 128})  // ... after a group norm (plain NCHW)
    ->Args({0, 1, 1, 384, 32, 128})  // ... the up block's concatenated input
    ->Args({1, 1, 1, 256, 16, 256})  // ... at 16x16
    ->Args({1, 1, 1, 512, 16, 512})  // ... the up block's first convolution
    ->Args({1, 1, 8, 128, 32, 128})  // ... batch 8
    ->Args({1, 1, 1, 64, 56, 64})    // resnet layer1
    ->Args({1, 1, 1, 128, 28, 128})  // resnet layer2
    ->Args({1, 1, 1, 256, 14, 256})  // resnet layer3
    ->Args({1, 1, 8, 512, 7, 512})   // resnet layer4, batch 8
    ->Args({1, 1, 1, 128, 56, 32})   // densenet121 block 1 (growth 32)
    ->Args({1, 1, 1, 128, 28, 32})   // densenet121 block 2
    ->Args({1, 1, 8, 128, 14, 32})   // densenet121 block 3, batch 8
    ->Args({1, 1, 1, 64, 224, 64})   // vgg16 block 1
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Grouped 3x3 kiln.conv2d with bias and relu, channels-last, as ResNeXt
// and RegNet run them. Args: N, C (= C_out), H (= W), groups, stride.
// Groups of 4 and 8 channels take Kiln's narrow-group kernel
// (kernels/conv_narrow_group.h); KILN_NARROW_GROUPS=0 gives oneDNN's.
void BM_GroupedConv3x3(benchmark::State& state) {
  const int64_t b = state.range(0), c = state.range(1), h = state.range(2),
                g = state.range(3), s = state.range(4);
  OneNode n("kiln.conv2d");
  Arg x = n.Tensor({b, h, h, c}, false);
  Arg w = n.Tensor({c, c / g, 3, 3}, true, -0.1f, 0.1f);
  Arg bias = n.Tensor({c}, true);
  Arg none;
  Arg relu = IntListArg({});
  relu.list.push_back(StringArg("relu"));
  if (!n.Prepare({x, w, bias, IntListArg({s, s}), IntListArg({1, 1}), IntListArg({1, 1}),
                  IntArg(g), none, relu, IntArg(1), IntArg(1)},
                 state)) {
    return;
  }
  const int64_t oh = (h - 1) / s + 1;
  TimeFlops(state, 2.0 * b * c * oh * oh * (c / g) * 9, [&] {
    for (auto _ : state) {
      if (!n.Run(state)) break;
    }
  });
}
BENCHMARK(BM_GroupedConv3x3)
    ->Args({1, 128, 56, 32, 1})  // resnext50_32x4d layer1 (4 channels a group)
    ->Args({8, 128, 56, 32, 1})  // ... batch 8
    ->Args({1, 256, 56, 32, 2})  // ... layer2's first block (8 a group)
    ->Args({1, 256, 28, 32, 1})  // ... layer2
    ->Args({1, 104, 28, 13, 1})  // regnet_y_400mf stage 2 (8 a group)
    ->Args({1, 768, 12, 6, 1})   // NF-Net-F0 stage 3 at 192x192 (128 a group)
    ->Args({1, 768, 24, 6, 2})   // ... its first block
    ->Args({1, 256, 24, 2, 1})   // NF-Net-F0 stage 1
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Args: M, K, N, weight constant (1) or computed (0).
void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), nn = state.range(2);
  OneNode n("aten.linear.default");
  Arg x = n.Tensor({m, k}, false);
  Arg w = n.Tensor({nn, k}, state.range(3) != 0);
  Arg b = n.Tensor({nn}, state.range(3) != 0);
  if (!n.Prepare({x, w, b}, state)) return;
  TimeFlops(state, 2.0 * m * k * nn, [&] {
    for (auto _ : state) {
      if (!n.Run(state)) break;
    }
  });
  // Few rows: the weight's bytes, read once per run, bound the time.
  state.counters["weight_GBps"] = benchmark::Counter(
      4.0 * k * nn * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Linear)
    ->Args({1, 512, 1000, 1})  // resnet18 fc
    ->Args({64, 784, 128, 1})  // MLP
    ->Args({64, 784, 128, 0})
    ->Args({8, 768, 3072, 1})->Args({32, 768, 3072, 1})->Args({256, 768, 3072, 1})
    ->Args({512, 768, 3072, 1})->Args({128, 512, 512, 1})->Args({128, 512, 1536, 1})
    ->Args({1, 768, 3072, 1})
    // Swin-T's first stage at batch 1 (3136 tokens of 96 channels: QKV,
    // MLP up, MLP down), ConvNeXt-T's pointwise layers alike.
    ->Args({3136, 96, 288, 1})
    ->Args({3136, 96, 384, 1})
    ->Args({3136, 384, 96, 1})
    ->Args({784, 192, 576, 1})
    ->Args({784, 768, 192, 1})
    // BERT-base at batch 1 x 128 tokens (QKV, FFN up, FFN down).
    ->Args({128, 768, 768, 1})
    ->Args({128, 768, 3072, 1})
    ->Args({128, 3072, 768, 1})
    // ViT-B/16 at batch 1: 197 tokens (QKV, FFN up, FFN down).
    ->Args({197, 768, 2304, 1})
    ->Args({197, 768, 3072, 1})
    ->Args({197, 3072, 768, 1})
    // ... and at batch 8: 1576 tokens.
    ->Args({1576, 768, 3072, 1})
    // Large: BERT-base at batch 8 x 128 tokens (QKV, FFN up, FFN down).
    ->Args({1024, 768, 768, 1})
    ->Args({1024, 768, 3072, 1})
    ->Args({1024, 3072, 768, 1})
    ->Args({1024, 768, 3072, 0})
    // ALBERT-xxlarge at 512 tokens (the Hugging Face suite): attention
    // projections, FFN up and down.
    ->Args({512, 4096, 4096, 1})
    ->Args({512, 4096, 16384, 1})
    ->Args({512, 16384, 4096, 1})
    // Few rows, large weights (memory-bound): alexnet / vgg16 classifiers
    // at batch 1 and 8, a Llama decode step's projections and LM head.
    ->Args({1, 9216, 4096, 1})->Args({2, 9216, 4096, 1})->Args({4, 9216, 4096, 1})
    ->Args({8, 9216, 4096, 1})
    ->Args({1, 4096, 4096, 1})->Args({1, 25088, 4096, 1})
    ->Args({1, 512, 1536, 1})->Args({8, 512, 1536, 1})
    ->Args({1, 512, 32000, 1})->Args({4, 512, 32000, 1})->Args({8, 512, 32000, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The few-row products above with the weight evicted from every cache
// before each run, as in a model, where the layers in between displace it
// (a Llama decode step's LM head is 62.5 MiB; the L3 cache here is 32).
// Args: M, K, N. Only the run is timed (manual time).
void BM_LinearCold(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), nn = state.range(2);
  OneNode n("aten.linear.default");
  Arg x = n.Tensor({m, k}, false);
  Arg w = n.Tensor({nn, k}, true);
  Arg b = n.Tensor({nn}, true);
  if (!n.Prepare({x, w, b}, state)) return;
  std::vector<char> evict(size_t{128} << 20);
  char fill = 0;
  for (auto _ : state) {
    std::memset(evict.data(), ++fill, evict.size());
    const auto t0 = std::chrono::steady_clock::now();
    if (!n.Run(state)) break;
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["weight_GBps"] = benchmark::Counter(
      4.0 * k * nn * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_LinearCold)
    ->Args({1, 512, 32000})->Args({8, 512, 32000})
    ->Args({1, 9216, 4096})->Args({2, 9216, 4096})->Args({4, 9216, 4096})->Args({8, 9216, 4096})
    ->Args({1, 512, 1376})->Args({8, 512, 1376})
    ->Args({197, 768, 3072})  // ViT-B/16's FFN up: as a model meets it
    // 128 tokens against weights far larger than the caches, as the Hugging
    // Face suite meets them: Blenderbot's FFN up and down (2560 x 10240,
    // 100 MiB), M2M100's LM head (1024 x 128112, 500 MiB).
    ->Args({128, 2560, 10240})->Args({128, 10240, 2560})->Args({128, 1024, 128112})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Fused attention, Args: batch, heads, queries, keys, head size.
void BM_Attention(benchmark::State& state) {
  const int64_t b = state.range(0), h = state.range(1), l = state.range(2), s = state.range(3),
                e = state.range(4);
  OneNode n("aten._scaled_dot_product_flash_attention_for_cpu.default");
  Arg q = n.Tensor({b, h, l, e}, false);
  Arg k = n.Tensor({b, h, s, e}, false);
  Arg v = n.Tensor({b, h, s, e}, false);
  if (!n.Prepare({q, k, v}, state)) return;
  TimeFlops(state, 4.0 * b * h * l * s * e, [&] {
    for (auto _ : state) {
      if (!n.Run(state)) break;
    }
  });
}
BENCHMARK(BM_Attention)
    ->Args({1, 8, 1024, 1024, 16})  // UNet (small) self-attention at 32x32 latents
    ->Args({1, 8, 256, 256, 32})    // ... at 16x16
    ->Args({1, 8, 1024, 77, 16})    // cross-attention to text states
    ->Args({1, 12, 128, 128, 64})   // BERT-base, batch 1
    ->Args({8, 12, 128, 128, 64})   // BERT-base, batch 8
    ->Args({1, 12, 197, 197, 64})   // ViT-B/16
    ->Args({1, 12, 512, 512, 64})   // BERT-base at 512 tokens (the Hugging Face suite)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Args: M, K, N; both operands are run-time inputs.
void BM_Mm(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), nn = state.range(2);
  OneNode n("aten.mm.default");
  Arg a = n.Tensor({m, k}, false);
  Arg b = n.Tensor({k, nn}, false);
  if (!n.Prepare({a, b}, state)) return;
  TimeFlops(state, 2.0 * m * k * nn, [&] {
    for (auto _ : state) {
      if (!n.Run(state)) break;
    }
  });
}
BENCHMARK(BM_Mm)
    ->Args({512, 512, 512})
    ->Args({1024, 1024, 1024})
    ->Args({2048, 2048, 2048})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void BM_MaxPool(benchmark::State& state) {
  OneNode n("aten.max_pool2d_with_indices.default");
  Arg x = n.Tensor({1, 64, 112, 112}, false);
  if (!n.Prepare({x, IntListArg({3, 3}), IntListArg({2, 2}), IntListArg({1, 1})}, state)) return;
  for (auto _ : state) {
    if (!n.Run(state)) break;
  }
}
BENCHMARK(BM_MaxPool)->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void BM_Add(benchmark::State& state) {
  OneNode add("aten.add.Tensor");
  Arg a = add.Tensor({1, 64, 56, 56}, false);
  Arg b = add.Tensor({1, 64, 56, 56}, false);
  if (!add.Prepare({a, b}, state)) return;
  for (auto _ : state) {
    if (!add.Run(state)) break;
  }
  state.SetBytesProcessed(3 * 64 * 56 * 56 * 4 * state.iterations());
}
BENCHMARK(BM_Add)->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln::runtime
