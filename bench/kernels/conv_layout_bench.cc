// Activation layout benchmark: the same convolution computed by oneDNN with
// channels-last (NHWC) activations and with the 8-channel blocked layout
// (nChw8c), at representative resnet18 / mobilenet_v2 shapes. It answers
// which layout passes/channels_last.cc should keep between convolutions on
// this CPU: oneDNN's AVX2 kernels (jit:avx2, jit_1x1:avx2, jit_dw:avx2) are
// built for the blocked layout, its AVX-512 ones (brgconv) for NHWC.
//
// Each benchmark builds one primitive directly on oneDNN (weights
// prepacked, as kiln.conv2d does) and labels itself with the
// implementation oneDNN chose and the source layout tag::any would pick.
// Depthwise convolutions prefer jit_dw like kernels/convolution.cc. Runs in
// oneTBB's default arena (all threads); real time.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "benchmark/benchmark.h"

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// kNhwcDefault: NHWC with oneDNN's own choice of depthwise kernel
// (brdgmm_dw) instead of jit_dw. kBlocked16: 16-channel blocks (nChw16c,
// oneDNN's AVX-512 direct kernels), channels a multiple of 16.
enum Layout { kNhwc = 0, kBlocked = 1, kNhwcDefault = 2, kBlocked16 = 3, kPlain = 4 };

const dnnl::engine& Engine() {
  static const dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

// The direct depthwise kernel kernels/convolution.cc prefers: the one of
// the CPU's widest ISA (oneDNN offers its AVX2 one on AVX-512 CPUs too).
const char* PreferredDepthwiseImpl() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const bool avx512 = isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
                      isa == dnnl::cpu_isa::avx512_core_bf16 ||
                      isa == dnnl::cpu_isa::avx512_core_fp16 ||
                      isa == dnnl::cpu_isa::avx512_core_amx ||
                      isa == dnnl::cpu_isa::avx512_core_amx_fp16;
  return avx512 ? "jit_dw:avx512_core" : "jit_dw:avx2";
}

// The source layout oneDNN itself picks when left open.
std::string AnySourceTag(const dnnl::convolution_forward::primitive_desc& pd,
                         const memory::dims& src_dims) {
  const memory::desc src = pd.src_desc();
  if (src == memory::desc(src_dims, dt::f32, tag::nChw8c)) return "nChw8c";
  if (src == memory::desc(src_dims, dt::f32, tag::nChw16c)) return "nChw16c";
  if (src == memory::desc(src_dims, dt::f32, tag::nhwc)) return "nhwc";
  if (src == memory::desc(src_dims, dt::f32, tag::nchw)) return "nchw";
  return "other";
}

// Args: layout, N, C_in, H (= W), C_out, kernel, stride, groups (0 =
// depthwise). A 3-channel input stays NCHW in the blocked case (oneDNN's
// AVX2 first-layer kernel reads plain NCHW and writes nChw8c).
void BM_ConvLayout(benchmark::State& state) {
  const auto layout = static_cast<Layout>(state.range(0));
  const int64_t n = state.range(1), c = state.range(2), h = state.range(3), oc = state.range(4),
                k = state.range(5), s = state.range(6);
  const int64_t groups = state.range(7) == 0 ? c : state.range(7);
  const int64_t p = k / 2, oh = (h + 2 * p - k) / s + 1;
  const memory::dims src_dims = {n, c, h, h}, dst_dims = {n, oc, oh, oh};
  const bool nhwc = layout != kBlocked && layout != kPlain;
  const tag block_tag = layout == kBlocked16 ? tag::nChw16c : tag::nChw8c;
  const int64_t block = layout == kBlocked16 ? 16 : 8;
  const tag src_tag = layout == kPlain ? tag::nchw
                      : nhwc           ? tag::nhwc
                                       : (c % block == 0 ? block_tag : tag::nchw);
  const tag dst_tag = layout == kPlain ? tag::nchw : nhwc ? tag::nhwc : block_tag;
  const memory::dims w_dims = groups == 1 ? memory::dims{oc, c, k, k}
                                          : memory::dims{groups, oc / groups, c / groups, k, k};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto make = [&](tag st, tag dtg) {
    return dnnl::convolution_forward::primitive_desc(
        Engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        memory::desc(src_dims, dt::f32, st), memory::desc(w_dims, dt::f32, tag::any),
        memory::desc({oc}, dt::f32, tag::x), memory::desc(dst_dims, dt::f32, dtg), {s, s},
        {0, 0}, {p, p}, {p, p}, attr);
  };
  dnnl::convolution_forward::primitive_desc pd;
  try {
    pd = make(src_tag, dst_tag);
    if (groups == c && groups > 1 && (layout == kNhwc || layout == kBlocked)) {
      dnnl::convolution_forward::primitive_desc walk = pd;
      do {
        if (std::strcmp(walk.impl_info_str(), PreferredDepthwiseImpl()) == 0) {
          pd = walk;
          break;
        }
      } while (walk.next_impl());
    }
  } catch (const dnnl::error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const std::string any_tag = AnySourceTag(make(tag::any, tag::any), src_dims);
  state.SetLabel(std::string(pd.impl_info_str()) + " (any: " + any_tag + ")");

  dnnl::convolution_forward conv(pd);
  memory src(pd.src_desc(), Engine()), dst(pd.dst_desc(), Engine());
  memory weights(pd.weights_desc(), Engine()), bias(pd.bias_desc(), Engine());
  memory pad(pd.scratchpad_desc(), Engine());
  for (memory* m : {&src, &weights, &bias, &dst}) {
    float* f = static_cast<float*>(m->get_data_handle());
    const size_t count = m->get_desc().get_size() / sizeof(float);
    for (size_t i = 0; i < count; ++i) f[i] = static_cast<float>((i * 7919) % 17) / 17.0f - 0.5f;
  }
  dnnl::stream stream(Engine());
  const std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src},
                                                {DNNL_ARG_WEIGHTS, weights},
                                                {DNNL_ARG_BIAS, bias},
                                                {DNNL_ARG_DST, dst},
                                                {DNNL_ARG_SCRATCHPAD, pad}};
  for (auto _ : state) {
    conv.execute(stream, args);
    stream.wait();
  }
  const double flops = 2.0 * n * oc * oh * oh * (c / groups) * k * k;
  state.counters["GFLOPS"] = benchmark::Counter(flops * state.iterations(),
                                                benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1000);
}

void LayoutArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layout", "N", "C", "H", "OC", "k", "s", "g"});
  const std::vector<std::vector<int64_t>> shapes = {
      {64, 56, 64, 3, 1, 1},     // resnet18 layer1 3x3
      {128, 28, 128, 3, 1, 1},   // resnet18 layer2 3x3
      {256, 14, 256, 3, 1, 1},   // resnet18 layer3 3x3
      {512, 7, 512, 3, 1, 1},    // resnet18 layer4 3x3
      {256, 56, 64, 1, 1, 1},    // resnet50 bottleneck reduce
      {64, 56, 256, 1, 1, 1},    // resnet50 bottleneck expand
      {3, 224, 64, 7, 2, 1},     // resnet18 conv1 7x7 stride 2
      {3, 224, 64, 11, 4, 1},    // alexnet conv1 11x11 stride 4 (padding 5, not 2)
      {24, 56, 144, 1, 1, 1},    // mobilenet_v2 1x1 expand
      {144, 56, 24, 1, 1, 1},    // mobilenet_v2 1x1 project
      {144, 56, 144, 3, 1, 0},   // mobilenet_v2 3x3 depthwise
      {144, 56, 144, 3, 2, 0},   // mobilenet_v2 3x3 depthwise, stride 2
      {960, 7, 960, 3, 1, 0},    // mobilenet_v2 3x3 depthwise, last stage
      {960, 7, 160, 1, 1, 1},    // mobilenet_v2 1x1 project, last stage
      {3, 224, 16, 3, 2, 1},     // mobilenet_v3 stem 3x3 stride 2
      {16, 112, 16, 3, 1, 0},    // mobilenet_v3 3x3 depthwise at 112x112
      {16, 112, 16, 1, 1, 1},    // mobilenet_v3 1x1 at 112x112
      {16, 112, 64, 1, 1, 1},    // mobilenet_v3 1x1 expand at 112x112
      {64, 112, 64, 3, 2, 0},    // mobilenet_v3 3x3 depthwise stride 2
      {672, 14, 112, 1, 1, 1},   // mobilenet_v3 1x1 project at 14x14
      {48, 112, 48, 3, 2, 6},    // regnet_y_400mf grouped 3x3 (8 channels a group)
      {48, 112, 48, 3, 2, 1},    // the same as a dense convolution
      {104, 56, 104, 3, 2, 13},  // regnet_y_400mf stage 2 grouped 3x3
      {104, 28, 104, 3, 1, 13},  // regnet_y_400mf stage 2 grouped 3x3, stride 1
      {58, 28, 58, 1, 1, 1},     // shufflenet_v2 1x1 at 28x28
      {116, 14, 116, 1, 1, 1},   // shufflenet_v2 1x1 at 14x14
      {232, 7, 232, 1, 1, 1},    // shufflenet_v2 1x1 at 7x7
      {16, 55, 64, 3, 1, 1},     // squeezenet1_1 expand 3x3 at 55x55
      {64, 13, 256, 3, 1, 1},    // squeezenet1_1 expand 3x3 at 13x13
      {512, 13, 1000, 1, 1, 1},  // squeezenet1_1 classifier 1x1
  };
  for (int64_t batch : {1, 8}) {
    for (const auto& sh : shapes) {
      for (int64_t layout : {kNhwc, kBlocked, kNhwcDefault, kBlocked16, kPlain}) {
        if (layout == kNhwcDefault && sh[5] != 0) continue;
        if (layout == kBlocked16 && (sh[0] % 16 != 0 && sh[0] != 3)) continue;
        b->Args({layout, batch, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]});
      }
    }
  }
}

// The machine may be shared: with --benchmark_repetitions, the minimum is
// the figure least disturbed by other processes.
BENCHMARK(BM_ConvLayout)
    ->Apply(LayoutArgs)
    ->UseRealTime()
    ->ComputeStatistics("min",
                        [](const std::vector<double>& v) {
                          return *std::min_element(v.begin(), v.end());
                        })
    ->Unit(benchmark::kMicrosecond);

}  // namespace
