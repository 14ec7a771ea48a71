// Fused scaled dot-product attention on f32:
// aten._scaled_dot_product_flash_attention_for_cpu.default
//   (query [B, Hq, L, E], key [B, Hkv, S, E], value [B, Hkv, S, Ev],
//    dropout_p=0, is_causal=False, *, attn_mask=None, scale=None)
//   -> (output [B, Hq, L, Ev], logsumexp [B, Hq, L])
//
// Semantics follow PyTorch's math reference: scores = scale * q k^T (scale
// defaults to 1/sqrt(E)) plus attn_mask (f32, added; or bool, False masks
// out) broadcast to [B, Hq, L, S]; is_causal keeps key j for query i when
// j <= i (top-left aligned, as torch.tril(ones(L, S))); grouped-query
// attention maps query head h to key/value head h / (Hq / Hkv). A row whose
// keys are all masked gives zeros and logsumexp 0, as ATen's CPU kernel
// does. Only dropout_p == 0 (inference) is accepted.
//
// Work is split over (batch, head, block of query rows). A run first lays
// out K^T per key/value head (in run scratch), so that each block's
// scores are one small product, Q_block @ K^T, and its output another,
// P @ V (microkernels/small_gemm.h), with the softmax between them on the
// block's rows while they are in cache.
//
// K^T and V are laid out in strips of 16 columns, each strip contiguous
// (K^T's: E rows of 16 keys; V's: S rows of 16 of its columns), and the
// products run strip by strip. Read in place, a 16-column tile walks rows
// S (or Ev) floats apart, which at 512 or 1024 keys fall on a few cache
// sets and are evicted before the next tile reads them again.
// KILN_ATTENTION_STRIPS=0 keeps the plain layouts, for comparisons.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/broadcast.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/microkernels/small_gemm.h"
#include "runtime/kernels/strided_loop.h"
#include "runtime/kernels/vector_math.h"
#include "runtime/kernels/worker_scratch.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

struct AttentionSpec {
  int64_t b = 0, hq = 0, hkv = 0, l = 0, s = 0, e = 0, ev = 0;
  float scale = 1.0f;
  bool causal = false;
  int q_slot = 0, k_slot = 1, v_slot = 2, mask_slot = -1;
  DType mask_dtype = DType::kF32;
  // Mask element strides over [B, Hq, L, S] (0 where broadcast).
  std::vector<int64_t> mask_strides;
  // Query rows per task: the block's scores (rows x S floats) stay within
  // about 256 KiB, so they are still in L2 when P @ V reads them back.
  int64_t block = 1;
  // K^T and V in strips of 16 columns (see the top of the file).
  bool strips = false;
};

constexpr int64_t kStrip = kSmallGemmStrip;

int64_t Strips(int64_t n) { return (n + kStrip - 1) / kStrip; }

// Floats of one head's K^T and V in strips.
int64_t KStripFloats(const AttentionSpec& s) { return Strips(s.s) * kStrip * s.e; }
int64_t VStripFloats(const AttentionSpec& s) { return Strips(s.ev) * kStrip * s.s; }

constexpr int64_t kMaxBlock = 96;
// Queries up to which scores are dot products over K's rows (no K^T).
constexpr int64_t kFewQueries = 4;

class AttentionKernel final : public Kernel {
 public:
  explicit AttentionKernel(AttentionSpec s)
      : s_(std::move(s)),
        scores_(AlignedTo64(KtBytes(s_)), static_cast<size_t>(s_.block * s_.s) * sizeof(float)) {}

  // K^T of every key/value head (none for a few queries: see kFewQueries),
  // then each worker's block of scores.
  size_t ScratchBytes() const override { return scores_.End(); }

  absl::Status Run(const KernelContext& ctx) const override {
    const AttentionSpec& s = s_;
    if (s.b * s.hq * s.l == 0) return absl::OkStatus();
    if (absl::Status arena = scores_.CheckArena(); !arena.ok()) return arena;
    const float* q = ctx.inputs[s.q_slot].as<const float>();
    const float* k = ctx.inputs[s.k_slot].as<const float>();
    const float* v = ctx.inputs[s.v_slot].as<const float>();
    const void* mask = s.mask_slot >= 0 ? ctx.inputs[s.mask_slot].data : nullptr;
    float* out = ctx.outputs[0].as<float>();
    float* lse = ctx.outputs[1].as<float>();
    // With a few queries (a decode step) each key is read once: dot
    // products straight from K cost less than laying out K^T first.
    const bool transposed = s.l > kFewQueries;
    float* kt = static_cast<float*>(ctx.scratch);
    float* vs = kt + s.b * s.hkv * KStripFloats(s);  // V's strips, after K^T's
    if (transposed) ParallelFor(s.b * s.hkv, 1, [&](int64_t begin, int64_t end) {
      for (int64_t head = begin; head < end; ++head) {
        const float* kh = k + head * s.s * s.e;
        if (!s.strips) {
          float* th = kt + head * s.e * s.s;
          for (int64_t j = 0; j < s.s; ++j) {
            for (int64_t c = 0; c < s.e; ++c) th[c * s.s + j] = kh[j * s.e + c];
          }
          continue;
        }
        // K^T strip t: row c holds keys 16t .. 16t + 15 of dim c.
        float* th = kt + head * KStripFloats(s);
        for (int64_t t = 0; t < Strips(s.s); ++t) {
          const int64_t width = std::min(kStrip, s.s - t * kStrip);
          float* strip = th + t * kStrip * s.e;
          for (int64_t j = 0; j < width; ++j) {
            const float* key = kh + (t * kStrip + j) * s.e;
            for (int64_t c = 0; c < s.e; ++c) strip[c * kStrip + j] = key[c];
          }
        }
        // V strip t: row j holds columns 16t .. 16t + 15 of value j.
        const float* vh = v + head * s.s * s.ev;
        float* vd = vs + head * VStripFloats(s);
        for (int64_t t = 0; t < Strips(s.ev); ++t) {
          const int64_t width = std::min(kStrip, s.ev - t * kStrip);
          float* strip = vd + t * kStrip * s.s;
          for (int64_t j = 0; j < s.s; ++j) {
            std::copy(vh + j * s.ev + t * kStrip, vh + j * s.ev + t * kStrip + width,
                      strip + j * kStrip);
          }
        }
      }
    });
    const int64_t blocks = (s.l + s.block - 1) / s.block;
    const int64_t group = s.hq / s.hkv;
    ParallelFor(s.b * s.hq * blocks, 1, [&](int64_t begin, int64_t end) {
      float* scores = scores_.Mine<float>(ctx.scratch);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t blk = t % blocks;
        const int64_t bh = t / blocks;
        const int64_t h = bh % s.hq, b = bh / s.hq;
        const int64_t kv_head = b * s.hkv + h / group;
        const int64_t i0 = blk * s.block;
        const int64_t rows = std::min(s.l, i0 + s.block) - i0;
        const float* keys = !transposed ? k + kv_head * s.s * s.e
                            : s.strips  ? kt + kv_head * KStripFloats(s)
                                        : kt + kv_head * s.e * s.s;
        const float* values = transposed && s.strips ? vs + kv_head * VStripFloats(s)
                                                     : v + kv_head * s.s * s.ev;
        RunBlock(bh, b, h, i0, rows, q, keys, transposed, values, mask, out, lse, scores);
      }
    });
    return absl::OkStatus();
  }

 private:
  // Rows [i0, i0 + rows) of head (b, h) (bh = b * Hq + h) against the
  // head's keys, K^T [E, S] when `transposed` else K [S, E], and V [S, Ev]
  // (K^T and V in strips when `transposed` and s.strips); sc holds rows x S
  // scores.
  void RunBlock(int64_t bh, int64_t b, int64_t h, int64_t i0, int64_t rows, const float* q,
                const float* kh, bool transposed, const float* vh, const void* mask, float* out,
                float* lse, float* sc) const {
    const AttentionSpec& s = s_;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    // Keys any row of the block may see (top-left causal: row i sees j <= i).
    const int64_t keys = s.causal ? std::min(s.s, i0 + rows) : s.s;
    float* ob = out + (bh * s.l + i0) * s.ev;
    const float* qb = q + (bh * s.l + i0) * s.e;
    const bool in_strips = transposed && s.strips;
    if (in_strips) {
      SmallGemmStrips(rows, keys, s.e, qb, s.e, kh, kStrip, kStrip * s.e, sc, s.s,
                      /*accumulate=*/false);
    } else if (transposed) {
      SmallGemm(rows, keys, s.e, qb, s.e, kh, s.s, sc, s.s, /*accumulate=*/false);
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < keys; ++j) {
          sc[r * s.s + j] = vmath::Dot(qb + r * s.e, kh + j * s.e, s.e);
        }
      }
    }
    // Softmax without its last division: P @ V is computed on e^(x - max)
    // and each output row divided by its sum afterwards (Ev values a row
    // instead of S).
    float inv_sum[kMaxBlock];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      float* row = sc + r * s.s;
      const int64_t n = s.causal ? std::min(s.s, i + 1) : s.s;
      float mx, sum;
      if (mask == nullptr && s.scale > 0.0f) {
        // max(scale * x) = scale * max(x): the scale goes into the exponent.
        mx = n > 0 ? s.scale * vmath::Max(row, n) : kNegInf;
        if (mx != kNegInf) sum = vmath::ExpAffineSum(row, s.scale, -mx, row, n);
      } else {
        if (s.scale != 1.0f) {
          for (int64_t j = 0; j < n; ++j) row[j] *= s.scale;
        }
        if (mask != nullptr) {
          const int64_t base =
              b * s.mask_strides[0] + h * s.mask_strides[1] + i * s.mask_strides[2];
          const int64_t js = s.mask_strides[3];
          if (s.mask_dtype == DType::kBool) {
            const bool* m = static_cast<const bool*>(mask) + base;
            for (int64_t j = 0; j < n; ++j) {
              if (!m[j * js]) row[j] = kNegInf;
            }
          } else {
            const float* m = static_cast<const float*>(mask) + base;
            if (js == 1) {  // a mask row of its own (T5's position bias): vectorized
              for (int64_t j = 0; j < n; ++j) row[j] += m[j];
            } else {
              for (int64_t j = 0; j < n; ++j) row[j] += m[j * js];
            }
          }
        }
        mx = n > 0 ? vmath::Max(row, n) : kNegInf;
        if (mx != kNegInf) sum = vmath::ExpShiftedSum(row, mx, row, n);
      }
      std::fill(row + n, row + keys, 0.0f);  // keys this row may not see
      if (mx == kNegInf) {  // every key masked (or no keys)
        std::fill(row, row + n, 0.0f);
        inv_sum[r] = 0.0f;
        lse[bh * s.l + i] = 0.0f;  // what ATen's CPU kernel reports
        continue;
      }
      inv_sum[r] = 1.0f / sum;
      lse[bh * s.l + i] = mx + std::log(sum);
    }
    if (in_strips) {
      SmallGemmStrips(rows, s.ev, keys, sc, s.s, vh, kStrip, kStrip * s.s, ob, s.ev,
                      /*accumulate=*/false);
    } else {
      SmallGemm(rows, s.ev, keys, sc, s.s, vh, s.ev, ob, s.ev, /*accumulate=*/false);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* orow = ob + r * s.ev;
      for (int64_t c = 0; c < s.ev; ++c) orow[c] *= inv_sum[r];
    }
  }

  static size_t KtBytes(const AttentionSpec& s) {
    if (s.l <= kFewQueries) return 0;
    if (s.strips) {
      return static_cast<size_t>(s.b * s.hkv * (KStripFloats(s) + VStripFloats(s))) *
             sizeof(float);
    }
    return static_cast<size_t>(s.b * s.hkv * s.e * s.s) * sizeof(float);
  }
  static size_t AlignedTo64(size_t n) { return (n + 63) / 64 * 64; }

  AttentionSpec s_;
  WorkerScratch scores_;
};

}  // namespace

absl::StatusOr<PreparedOp> PrepareFlashAttentionForCpu(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta q, args.Tensor(0, "query"));
  KILN_ASSIGN_OR_RETURN(TensorMeta k, args.Tensor(1, "key"));
  KILN_ASSIGN_OR_RETURN(TensorMeta v, args.Tensor(2, "value"));
  KILN_RETURN_IF_ERROR(RequireDType(args, q, "query"));
  KILN_RETURN_IF_ERROR(RequireDType(args, k, "key"));
  KILN_RETURN_IF_ERROR(RequireDType(args, v, "value"));
  KILN_ASSIGN_OR_RETURN(double dropout, args.Float(3, "dropout_p", 0.0));
  KILN_ASSIGN_OR_RETURN(bool causal, args.Bool(4, "is_causal", false));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> mask,
                        args.OptionalTensor(-1, "attn_mask"));
  if (dropout != 0.0) {
    return args.Unimplemented("attention dropout is not supported (inference only)");
  }
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) {
    return args.Error(absl::StrCat("query, key and value must be 4-D, got ",
                                   q.ToString(), ", ", k.ToString(), ", ",
                                   v.ToString()));
  }
  AttentionSpec s;
  s.b = q.shape[0];
  s.hq = q.shape[1];
  s.l = q.shape[2];
  s.e = q.shape[3];
  s.hkv = k.shape[1];
  s.s = k.shape[2];
  s.ev = v.shape[3];
  if (k.shape[0] != s.b || v.shape[0] != s.b || v.shape[1] != s.hkv ||
      v.shape[2] != s.s || k.shape[3] != s.e) {
    return args.Error(absl::StrCat("incompatible query ", q.ToString(),
                                   ", key ", k.ToString(), " and value ",
                                   v.ToString()));
  }
  if (s.hkv == 0 || s.hq % s.hkv != 0) {
    return args.Error(absl::StrCat("query heads (", s.hq,
                                   ") must be a multiple of key/value heads (",
                                   s.hkv, ")"));
  }
  const Arg* scale_arg = args.Find(-1, "scale");
  double scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(s.e, 1)));
  if (scale_arg != nullptr) {
    KILN_ASSIGN_OR_RETURN(scale, args.Float(-1, "scale"));
  }
  s.scale = static_cast<float>(scale);
  s.causal = causal;
  // A multiple of 12 rows (SmallGemm's tile heights are 6 and 12).
  s.block = std::clamp<int64_t>((int64_t{64} << 10) / std::max<int64_t>(s.s, 1) / 12 * 12, 12,
                               kMaxBlock);
  // Heads of 16 dims (a small UNet's) have scores products too short for
  // the strips to pay (bench/kernels BM_Attention/1/8/1024/1024/16).
  s.strips = s.e >= 32 && KernelSwitchOn("KILN_ATTENTION_STRIPS");
  s.q_slot = InputIndex(args, 0, "query");
  s.k_slot = InputIndex(args, 1, "key");
  s.v_slot = InputIndex(args, 2, "value");
  if (mask) {
    if (mask->dtype != DType::kF32 && mask->dtype != DType::kBool) {
      return args.Error(absl::StrCat("attn_mask must be f32 or bool, got ",
                                     mask->ToString()));
    }
    const std::vector<int64_t> full = {s.b, s.hq, s.l, s.s};
    if (mask->rank() > 4 || BroadcastShapes(mask->shape, full) != full) {
      return args.Error(absl::StrCat("attn_mask ", mask->ToString(),
                                     " does not broadcast to ",
                                     ShapeString(full)));
    }
    s.mask_slot = InputIndex(args, -1, "attn_mask");
    s.mask_dtype = mask->dtype;
    s.mask_strides = BroadcastInputStrides(full, mask->shape);
  }
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, {s.b, s.hq, s.l, s.ev}},
                TensorMeta{DType::kF32, {s.b, s.hq, s.l}}};
  op.kernel = std::make_unique<AttentionKernel>(std::move(s));
  return op;
}

}  // namespace kiln::runtime
