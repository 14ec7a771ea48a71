// F(2x2, 3x3) Winograd convolution (see conv_winograd.h).
//
// With d a 4x4 input block, g a 3x3 filter and
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
//   A^T = [1 1 1 0; 0 1 -1 -1]
// the 2x2 output block is A^T [(G g G^T) . (B^T d B)] A, summed over input
// channels. Summing over channels is a matrix product per position p of
// the 4x4 transformed block: M[p] = V[p] @ U[p] with V[p] = [tiles, C]
// (transformed inputs), U[p] = [C, OC] (transformed weights, packed once).
//
// A run walks the tiles in chunks that keep V and M within a few MiB (in
// cache, and a bounded scratch): input transform (parallel over tiles),
// the 16 products as one batched oneDNN matmul, output transform (parallel
// over tiles), which adds the bias and applies the post-ops to each 2x2
// block before storing it. A residual is read at a block's own pixels
// before the block is stored, so the output may share the residual's bytes
// (plan/in_place.h). Activations are channels-last inside the kernel: a
// plain NCHW input is reordered once per run, and a plain output is
// computed channels-last in scratch and reordered at the end (with a
// residual, that is first reordered into scratch too, which keeps sharing
// its bytes with the output safe). Scattering a block's pixels straight
// into NCHW touched one cache line per channel, which made unet's plain
// 128-channel convolutions slower than oneDNN's direct kernel.
#include "runtime/kernels/conv_winograd.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/kernels/post_op_loops.h"
#include "runtime/kernels/worker_scratch.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr int64_t kPositions = 16;  // a 4x4 transformed block
// Fewer tiles leave the products too short to beat the direct kernel.
constexpr int64_t kMinTiles = 64;
constexpr int64_t kMinChannels = 32;
// V and M of one chunk: within the last-level cache of a small machine.
constexpr int64_t kChunkBytes = int64_t{6} << 20;

bool Enabled() {
  static const bool on = KernelSwitchOn("KILN_WINOGRAD");
  return on;
}

struct Gemm {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  memory::desc src_md, dst_md;
};

class WinogradConvKernel final : public Kernel {
 public:
  struct Config {
    WinogradConvShape s;
    int64_t tiles_h = 0, tiles_w = 0, tiles = 0, chunk = 0;
    int input_index = -1, bias_index = -1, residual_index = -1;
    std::vector<float> bias;  // a constant bias, copied
    std::vector<PostOpRun> post_ops;
    PackedConstant weights;  // U: [16, C, OC] in the products' layout
    Gemm full, tail;         // chunks of `chunk` tiles, and the last one
    // Plain activations: the input and the residual reordered to
    // channels-last in scratch, the output computed there and reordered
    // into place.
    std::optional<ScratchReorder> to_nhwc, residual_to_nhwc;
    memory::desc plain_in_md, plain_out_md, nhwc_out_md;
    std::optional<dnnl::reorder> to_plain;
    dnnl::reorder::primitive_desc to_plain_pd;
    size_t out_offset = 0, to_plain_pad_offset = 0;
    size_t v_offset = 0, m_offset = 0, pad_offset = 0, scratch_bytes = 0;
    WorkerScratch block;
  };

  explicit WinogradConvKernel(Config c) : c_(std::move(c)) {}

  size_t ScratchBytes() const override { return c_.scratch_bytes; }

  absl::Status Run(const KernelContext& ctx) const override {
    char* scratch = static_cast<char*>(ctx.scratch);
    const float* in = ctx.inputs[c_.input_index].as<const float>();
    const float* bias = !c_.bias.empty() ? c_.bias.data() : ctx.OptionalF32(c_.bias_index);
    const float* residual = ctx.OptionalF32(c_.residual_index);
    float* const user_out = ctx.outputs[0].as<float>();
    float* out = c_.to_plain ? reinterpret_cast<float*>(scratch + c_.out_offset) : user_out;
    float* v = reinterpret_cast<float*>(scratch + c_.v_offset);
    float* m = reinterpret_cast<float*>(scratch + c_.m_offset);
    if (absl::Status arena = c_.block.CheckArena(); !arena.ok()) return arena;
    return RunDnnl("winograd convolution", [&]() -> absl::Status {
      const dnnl::engine& engine = CpuEngine();
      dnnl::stream stream(engine);
      if (c_.to_nhwc) {
        memory src(c_.plain_in_md, engine, const_cast<float*>(in));
        in = static_cast<const float*>(c_.to_nhwc->Run(stream, src, scratch).get_data_handle());
      }
      if (c_.residual_to_nhwc && residual != nullptr) {
        memory src(c_.plain_out_md, engine, const_cast<float*>(residual));
        residual = static_cast<const float*>(
            c_.residual_to_nhwc->Run(stream, src, scratch).get_data_handle());
      }
      stream.wait();
      for (int64_t t0 = 0; t0 < c_.tiles; t0 += c_.chunk) {
        const int64_t rows = std::min(c_.chunk, c_.tiles - t0);
        ParallelFor(rows, 4, [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) InputTile(in, t0 + r, r, rows, v);
        });
        const Gemm& g = rows == c_.chunk ? c_.full : c_.tail;
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_SRC, memory(g.src_md, engine, v)},
            {DNNL_ARG_WEIGHTS, c_.weights.memory},
            {DNNL_ARG_DST, memory(g.dst_md, engine, m)}};
        if (g.pd.scratchpad_desc().get_size() > 0) {
          args[DNNL_ARG_SCRATCHPAD] =
              memory(g.pd.scratchpad_desc(), engine, scratch + c_.pad_offset);
        }
        g.prim.execute(stream, args);
        stream.wait();
        ParallelFor(rows, 4, [&](int64_t b, int64_t e) {
          float* block = c_.block.Mine<float>(ctx.scratch);
          for (int64_t r = b; r < e; ++r) {
            OutputTile(m, t0 + r, r, rows, bias, residual, out, block);
          }
        });
      }
      if (c_.to_plain) {
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_FROM, memory(c_.nhwc_out_md, engine, out)},
            {DNNL_ARG_TO, memory(c_.plain_out_md, engine, user_out)}};
        if (c_.to_plain_pd.scratchpad_desc().get_size() > 0) {
          args[DNNL_ARG_SCRATCHPAD] = memory(c_.to_plain_pd.scratchpad_desc(), engine,
                                             scratch + c_.to_plain_pad_offset);
        }
        c_.to_plain->execute(stream, args);
        stream.wait();
      }
      return absl::OkStatus();
    });
  }

 private:
  // Tile t (over images, then rows and columns of 2x2 output blocks) of
  // the channels-last input into row r of the chunk's V[16][rows][C].
  void InputTile(const float* in, int64_t t, int64_t r, int64_t rows, float* v) const {
    const WinogradConvShape& s = c_.s;
    const int64_t per_image = c_.tiles_h * c_.tiles_w;
    const int64_t n = t / per_image, ty = t % per_image / c_.tiles_w, tx = t % c_.tiles_w;
    const int64_t y0 = ty * 2 - s.pad_h, x0 = tx * 2 - s.pad_w;
    const float* image = in + n * s.h * s.w * s.c;
    const float* at[4][4];  // nullptr outside the image (zero padding)
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        const int64_t y = y0 + i, x = x0 + j;
        at[i][j] = (y >= 0 && y < s.h && x >= 0 && x < s.w) ? image + (y * s.w + x) * s.c : nullptr;
      }
    }
    const int64_t plane = rows * s.c;  // between positions of V
    float* dst = v + r * s.c;
    for (int64_t c = 0; c < s.c; c += 8) {
      __m256 d[4][4];
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          d[i][j] = at[i][j] != nullptr ? _mm256_loadu_ps(at[i][j] + c) : _mm256_setzero_ps();
        }
      }
      __m256 t4[4][4];  // B^T d
      for (int j = 0; j < 4; ++j) {
        t4[0][j] = _mm256_sub_ps(d[0][j], d[2][j]);
        t4[1][j] = _mm256_add_ps(d[1][j], d[2][j]);
        t4[2][j] = _mm256_sub_ps(d[2][j], d[1][j]);
        t4[3][j] = _mm256_sub_ps(d[1][j], d[3][j]);
      }
      for (int i = 0; i < 4; ++i) {  // (B^T d) B
        float* row = dst + (i * 4) * plane + c;
        _mm256_storeu_ps(row, _mm256_sub_ps(t4[i][0], t4[i][2]));
        _mm256_storeu_ps(row + plane, _mm256_add_ps(t4[i][1], t4[i][2]));
        _mm256_storeu_ps(row + 2 * plane, _mm256_sub_ps(t4[i][2], t4[i][1]));
        _mm256_storeu_ps(row + 3 * plane, _mm256_sub_ps(t4[i][1], t4[i][3]));
      }
    }
  }

  // Row r of the chunk's M[16][rows][OC] into the 2x2 output block of tile
  // t of the channels-last output: bias, post-ops (block holds [4][OC], the
  // pixels in row-major order), then the pixels inside the output are
  // stored.
  void OutputTile(const float* m, int64_t t, int64_t r, int64_t rows, const float* bias,
                  const float* residual, float* out, float* block) const {
    const WinogradConvShape& s = c_.s;
    const int64_t per_image = c_.tiles_h * c_.tiles_w;
    const int64_t n = t / per_image, ty = t % per_image / c_.tiles_w, tx = t % c_.tiles_w;
    const int64_t plane = rows * s.oc;
    const float* src = m + r * s.oc;
    for (int64_t o = 0; o < s.oc; o += 8) {
      __m256 z[2][4];  // A^T M
      for (int j = 0; j < 4; ++j) {
        const __m256 m0 = _mm256_loadu_ps(src + j * plane + o);
        const __m256 m1 = _mm256_loadu_ps(src + (4 + j) * plane + o);
        const __m256 m2 = _mm256_loadu_ps(src + (8 + j) * plane + o);
        const __m256 m3 = _mm256_loadu_ps(src + (12 + j) * plane + o);
        z[0][j] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
        z[1][j] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
      }
      const __m256 b = bias != nullptr ? _mm256_loadu_ps(bias + o) : _mm256_setzero_ps();
      for (int i = 0; i < 2; ++i) {  // (A^T M) A
        const __m256 y0 = _mm256_add_ps(_mm256_add_ps(z[i][0], z[i][1]), z[i][2]);
        const __m256 y1 = _mm256_sub_ps(_mm256_sub_ps(z[i][1], z[i][2]), z[i][3]);
        _mm256_storeu_ps(block + (i * 2) * s.oc + o, _mm256_add_ps(y0, b));
        _mm256_storeu_ps(block + (i * 2 + 1) * s.oc + o, _mm256_add_ps(y1, b));
      }
    }
    // The block's pixels inside the output, and where they start.
    int64_t at[4];
    bool inside[4];
    for (int q = 0; q < 4; ++q) {
      const int64_t y = ty * 2 + q / 2, x = tx * 2 + q % 2;
      inside[q] = y < s.oh && x < s.ow;
      at[q] = ((n * s.oh + y) * s.ow + x) * s.oc;
    }
    for (const PostOpRun& run : c_.post_ops) {
      if (!run.add) {
        ApplyPostOps(run.activations, block, 4 * s.oc);
        continue;
      }
      for (int q = 0; q < 4; ++q) {
        if (!inside[q]) continue;
        float* dst = block + q * s.oc;
        const float* res = residual + at[q];
        for (int64_t o = 0; o < s.oc; ++o) dst[o] += res[o];
      }
    }
    for (int q = 0; q < 4; ++q) {
      if (inside[q]) std::memcpy(out + at[q], block + q * s.oc, s.oc * sizeof(float));
    }
  }

  Config c_;
};

// U[p][c][o] = (G g G^T)[p] for g = weight[o][c] (OIHW, 3x3), in double.
std::vector<float> TransformWeights(const float* weight, int64_t oc, int64_t c) {
  std::vector<float> u(static_cast<size_t>(kPositions * c * oc));
  for (int64_t o = 0; o < oc; ++o) {
    for (int64_t i = 0; i < c; ++i) {
      const float* g = weight + (o * c + i) * 9;
      double t[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        const double g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
        t[0][j] = g0;
        t[1][j] = 0.5 * (g0 + g1 + g2);
        t[2][j] = 0.5 * (g0 - g1 + g2);
        t[3][j] = g2;
      }
      for (int a = 0; a < 4; ++a) {  // (G g) G^T
        const double u4[4] = {t[a][0], 0.5 * (t[a][0] + t[a][1] + t[a][2]),
                              0.5 * (t[a][0] - t[a][1] + t[a][2]), t[a][2]};
        for (int b = 0; b < 4; ++b) {
          u[((a * 4 + b) * c + i) * oc + o] = static_cast<float>(u4[b]);
        }
      }
    }
  }
  return u;
}

}  // namespace

bool WinogradApplies(const WinogradConvShape& s, int64_t kh, int64_t kw,
                     const std::array<int64_t, 2>& stride,
                     const std::array<int64_t, 2>& dilation, int64_t groups,
                     bool constant_weight, bool f32_compute, const std::vector<PostOp>& post_ops) {
  if (!Enabled() || !constant_weight || !f32_compute) return false;
  if (kh != 3 || kw != 3 || groups != 1) return false;
  if (stride[0] != 1 || stride[1] != 1 || dilation[0] != 1 || dilation[1] != 1) return false;
  if (s.pad_h > 2 || s.pad_w > 2 || s.oh <= 0 || s.ow <= 0) return false;
  for (ActivationLayout l : {s.layout_in, s.layout_out}) {
    if (l == ActivationLayout::kBlocked) return false;
  }
  if (s.c % 8 != 0 || s.oc % 8 != 0 || s.c < kMinChannels || s.oc < kMinChannels) return false;
  for (const PostOp& op : post_ops) {
    if (op.kind != PostOp::Kind::kAdd && !LoopsImplement({op})) return false;
  }
  const int64_t tiles = s.n * ((s.oh + 1) / 2) * ((s.ow + 1) / 2);
  return tiles >= kMinTiles;
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeWinogradConv(
    const NodeArgs& args, const WinogradConvShape& s, const float* weight, const float* bias,
    int input_index, int bias_index, int residual_index, std::vector<PostOp> post_ops) {
  // The bias is copied here: bytes from the cache directory are read in
  // and checked first. The weight is read only when its transform is not
  // found packed (PackDerivedConstant checks it then).
  CheckBeforePrepareReads(bias);
  WinogradConvKernel::Config cfg;
  cfg.s = s;
  cfg.tiles_h = (s.oh + 1) / 2;
  cfg.tiles_w = (s.ow + 1) / 2;
  cfg.tiles = s.n * cfg.tiles_h * cfg.tiles_w;
  const int64_t per_tile = kPositions * (s.c + s.oc) * static_cast<int64_t>(sizeof(float));
  cfg.chunk = std::min(cfg.tiles, std::max(kMinTiles, kChunkBytes / per_tile));
  cfg.input_index = input_index;
  cfg.bias_index = bias_index;
  cfg.residual_index = residual_index;
  cfg.post_ops = SplitPostOpRuns(std::move(post_ops));
  KILN_RETURN_IF_ERROR(BuildDnnl(args, "the Winograd products", [&]() -> absl::Status {
    const dnnl::engine& engine = CpuEngine();
    // [OC, C] per position when the outputs are at least as wide as the
    // reduction: oneDNN's AVX2 gemm runs that form faster (see matmul.cc).
    const memory::dims wdims = {kPositions, s.c, s.oc};
    const memory::desc user_md(wdims, dt::f32, tag::abc);
    const memory::desc packed_md(wdims, dt::f32, s.oc >= s.c ? tag::acb : tag::abc);
    const dnnl::primitive_attr attr = AttrFor(args.options());
    auto make_gemm = [&](int64_t rows) {
      Gemm g;
      g.src_md = memory::desc({kPositions, rows, s.c}, dt::f32, tag::abc);
      g.dst_md = memory::desc({kPositions, rows, s.oc}, dt::f32, tag::abc);
      g.pd = dnnl::matmul::primitive_desc(engine, g.src_md, packed_md, g.dst_md, attr);
      g.prim = dnnl::matmul(g.pd);
      return g;
    };
    cfg.full = make_gemm(cfg.chunk);
    const int64_t last = cfg.tiles % cfg.chunk;
    cfg.tail = last > 0 ? make_gemm(last) : cfg.full;
    size_t scratch = 0;
    if (s.layout_in == ActivationLayout::kPlain) {
      cfg.plain_in_md = memory::desc({s.n, s.c, s.h, s.w}, dt::f32, tag::nchw);
      cfg.to_nhwc = ScratchReorder::Make(
          cfg.plain_in_md, memory::desc({s.n, s.c, s.h, s.w}, dt::f32, tag::nhwc), &scratch);
    }
    auto take = [&scratch](size_t bytes) {
      const size_t at = scratch;
      scratch += (bytes + 63) / 64 * 64;
      return at;
    };
    if (s.layout_out == ActivationLayout::kPlain) {
      const memory::dims dims = {s.n, s.oc, s.oh, s.ow};
      cfg.plain_out_md = memory::desc(dims, dt::f32, tag::nchw);
      cfg.nhwc_out_md = memory::desc(dims, dt::f32, tag::nhwc);
      if (residual_index >= 0) {
        cfg.residual_to_nhwc = ScratchReorder::Make(cfg.plain_out_md, cfg.nhwc_out_md, &scratch);
      }
      cfg.out_offset = take(cfg.nhwc_out_md.get_size());
      cfg.to_plain_pd = dnnl::reorder::primitive_desc(engine, cfg.nhwc_out_md, engine,
                                                      cfg.plain_out_md, ReentrantAttr());
      cfg.to_plain = dnnl::reorder(cfg.to_plain_pd);
      cfg.to_plain_pad_offset = take(cfg.to_plain_pd.scratchpad_desc().get_size());
    }
    cfg.v_offset = take(kPositions * cfg.chunk * s.c * sizeof(float));
    cfg.m_offset = take(kPositions * cfg.chunk * s.oc * sizeof(float));
    cfg.pad_offset = take(std::max(cfg.full.pd.scratchpad_desc().get_size(),
                                   cfg.tail.pd.scratchpad_desc().get_size()));
    // Each worker's 4 x OC block of an output tile (OutputTile).
    cfg.block = WorkerScratch(scratch, 4 * s.oc * sizeof(float));
    cfg.scratch_bytes = cfg.block.End();
    const std::string key = args.ConstantKey(1, "weight");
    std::vector<float> u;
    cfg.weights = PackDerivedConstant(
        user_md, weight,
        [&]() -> const void* {
          u = TransformWeights(weight, s.oc, s.c);
          return u.data();
        },
        key.empty() ? "" : key + "/winograd-f2x3", packed_md);
    return absl::OkStatus();
  }));
  if (bias != nullptr) cfg.bias.assign(bias, bias + s.oc);
  return std::unique_ptr<Kernel>(std::make_unique<WinogradConvKernel>(std::move(cfg)));
}

}  // namespace kiln::runtime
