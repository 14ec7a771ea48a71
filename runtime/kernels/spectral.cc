// Discrete Fourier transforms and the complex views around them:
// aten._fft_c2c, _fft_r2c and _fft_c2r (what torch.fft's functions lower
// to), aten.view_as_real and view_as_complex, and complex conjugation
// (aten._conj, _conj_physical, conj_physical, resolve_conj).
//
// A transform over several dims runs one pass per dim: each pass gathers
// the lines along its dim, eight at a time, transforms them with an
// FftPlan and scatters them back, the last pass scaling by the
// normalization. Along an inner dim the eight are neighbours, so each read
// takes a whole cache line. A real input's line of even length n runs
// as a complex transform of length n/2 (even samples the real parts, odd
// ones the imaginary), recombined into the line's spectrum.
//
// ATen's normalization argument: 0 none, 1 by 1/sqrt(n), 2 by 1/n, where
// n is the product of the signal sizes over the transformed dims.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/fft_plan.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/worker_scratch.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kLines = FftPlan::kLines;

// Where a pass reads and writes.
enum class Buffer { kInput, kOutput, kScratch };

// What a pass reads: complex lines of the plan's length, real lines
// (imaginary parts zero), or the first n/2 + 1 values of a Hermitian
// line, whose other half is the mirror image's conjugate.
enum class Read { kComplex, kReal, kHermitian };

struct Pass {
  const FftPlan* plan = nullptr;
  Buffer src = Buffer::kInput, dst = Buffer::kOutput;
  Read read = Read::kComplex;
  bool real_out = false;  // keep the real parts (c2r's last pass)
  // A real line of even length n read as n/2 complex values (even samples
  // real, odd ones imaginary) and transformed at half length; `twiddles`
  // holds exp(-2*pi*i * k/n) for k = 0..n/2, to recombine the halves.
  bool half = false;
  std::shared_ptr<const std::vector<Complex>> twiddles;
  // outer and inner are the same in both; n is the line's length there.
  DimLines in, out;
  float scale = 1.0f;
};

// Each pass transforms its lines kLines at a time (FftPlan::RunLines):
// a group is kLines consecutive lines in (outer, inner) order, so along an
// inner dim its values sit side by side in memory, and along the last dim
// it is kLines rows.
class FftKernel final : public Kernel {
 public:
  FftKernel(std::vector<std::unique_ptr<FftPlan>> plans, std::vector<Pass> passes,
            int64_t scratch_elements)
      : plans_(std::move(plans)), passes_(std::move(passes)) {
    int64_t per_worker = 0;
    for (const Pass& p : passes_) {
      per_worker = std::max(per_worker, 2 * p.plan->size() * kLines + p.plan->WorkFloats());
    }
    const size_t shared = static_cast<size_t>(scratch_elements) * sizeof(Complex);
    lines_ = WorkerScratch((shared + 63) / 64 * 64, static_cast<size_t>(per_worker) * sizeof(float));
  }

  size_t ScratchBytes() const override { return lines_.End(); }

  absl::Status Run(const KernelContext& ctx) const override {
    if (absl::Status arena = lines_.CheckArena(); !arena.ok()) return arena;
    for (const Pass& p : passes_) RunPass(ctx, p);
    return absl::OkStatus();
  }

 private:
  static void* Address(const KernelContext& ctx, Buffer b) {
    switch (b) {
      case Buffer::kInput: return const_cast<void*>(ctx.inputs[0].data);
      case Buffer::kOutput: return ctx.outputs[0].data;
      case Buffer::kScratch: return ctx.scratch;
    }
    return nullptr;
  }

  void RunPass(const KernelContext& ctx, const Pass& p) const {
    const void* src = Address(ctx, p.src);
    void* dst = Address(ctx, p.dst);
    const int64_t n = p.plan->size();
    const int64_t lines = p.in.outer * p.in.inner;
    const int64_t groups = (lines + kLines - 1) / kLines;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / (n * kLines));
    ParallelFor(groups, grain, [&](int64_t begin, int64_t end) {
      float* re = lines_.Mine<float>(ctx.scratch);
      float* im = re + n * kLines;
      float* work = im + n * kLines;
      for (int64_t g = begin; g < end; ++g) {
        const int64_t first = g * kLines;
        const int64_t count = std::min(kLines, lines - first);
        if (p.half) {
          GatherHalves(p, src, first, count, re, im);
          p.plan->RunLines(re, im, work);
          ScatterRecombined(p, re, im, first, count, dst);
          continue;
        }
        Gather(p, src, first, count, re, im);
        p.plan->RunLines(re, im, work);
        Scatter(p, re, im, first, count, dst);
      }
    });
  }

  // Offset of element 0 of line `line` in a tensor with these lines.
  static int64_t LineBase(const DimLines& l, int64_t line) {
    return (line / l.inner) * l.n * l.inner + line % l.inner;
  }

  // Value j of line first + b into [j * kLines + b] of re and im, extended
  // to the plan's length; lines past `count` are zeros.
  static void Gather(const Pass& p, const void* src, int64_t first, int64_t count, float* re,
                     float* im) {
    const int64_t n = p.plan->size(), inner = p.in.inner;
    int64_t base[kLines];
    for (int64_t b = 0; b < count; ++b) base[b] = LineBase(p.in, first + b);
    if (count < kLines) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t b = count; b < kLines; ++b) re[j * kLines + b] = im[j * kLines + b] = 0.0f;
      }
    }
    if (p.read == Read::kReal) {
      const float* s = static_cast<const float*>(src);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t b = 0; b < count; ++b) {
          re[j * kLines + b] = s[base[b] + j * inner];
          im[j * kLines + b] = 0.0f;
        }
      }
      return;
    }
    const Complex* s = static_cast<const Complex*>(src);
    const int64_t have = p.read == Read::kHermitian ? n / 2 + 1 : n;
    for (int64_t j = 0; j < have; ++j) {
      for (int64_t b = 0; b < count; ++b) {
        const Complex v = s[base[b] + j * inner];
        re[j * kLines + b] = v.real();
        im[j * kLines + b] = v.imag();
      }
    }
    for (int64_t j = have; j < n; ++j) {
      for (int64_t b = 0; b < count; ++b) {
        re[j * kLines + b] = re[(n - j) * kLines + b];
        im[j * kLines + b] = -im[(n - j) * kLines + b];
      }
    }
  }

  // Real lines of even length 2m packed as z[j] = x[2j] + i x[2j+1],
  // j < m (the plan's length).
  static void GatherHalves(const Pass& p, const void* src, int64_t first, int64_t count,
                           float* re, float* im) {
    const int64_t m = p.plan->size(), inner = p.in.inner;
    const float* s = static_cast<const float*>(src);
    int64_t base[kLines];
    for (int64_t b = 0; b < count; ++b) base[b] = LineBase(p.in, first + b);
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t b = 0; b < kLines; ++b) {
        const bool have = b < count;
        re[j * kLines + b] = have ? s[base[b] + 2 * j * inner] : 0.0f;
        im[j * kLines + b] = have ? s[base[b] + (2 * j + 1) * inner] : 0.0f;
      }
    }
  }

  // The spectrum of a real line from Z, the m-point transform of its
  // packed halves: with E and O the spectra of the even and odd samples,
  //   E[k] = (Z[k] + conj Z[m-k]) / 2,  O[k] = (Z[k] - conj Z[m-k]) / 2i,
  //   X[k] = E[k] + W^k O[k] for k <= m (W = exp(-2*pi*i / 2m)),
  //   X[k] = conj X[2m-k] above. The first out.n values, scaled, into dst.
  static void ScatterRecombined(const Pass& p, const float* re, const float* im, int64_t first,
                                int64_t count, void* dst) {
    const int64_t m = p.plan->size(), inner = p.out.inner, keep = p.out.n;
    const float half = 0.5f * p.scale;
    const Complex* w = p.twiddles->data();
    Complex* d = static_cast<Complex*>(dst);
    int64_t base[kLines];
    for (int64_t b = 0; b < count; ++b) base[b] = LineBase(p.out, first + b);
    for (int64_t k = 0; k < keep; ++k) {
      const bool mirrored = k > m;
      const int64_t kk = mirrored ? 2 * m - k : k;
      const int64_t a = kk % m, c = (m - a) % m;
      const float wr = w[kk].real(), wi = w[kk].imag();
      for (int64_t b = 0; b < count; ++b) {
        const float zr = re[a * kLines + b], zi = im[a * kLines + b];
        const float yr = re[c * kLines + b], yi = im[c * kLines + b];
        const float er = zr + yr, ei = zi - yi;  // 2 E[kk]
        const float or_ = zi + yi, oi = yr - zr;  // 2 O[kk]
        const float xr = (er + wr * or_ - wi * oi) * half;
        const float xi = (ei + wr * oi + wi * or_) * half;
        d[base[b] + k * inner] = Complex(xr, mirrored ? -xi : xi);
      }
    }
  }

  // The first out.n values of each line, scaled, into dst.
  static void Scatter(const Pass& p, const float* re, const float* im, int64_t first,
                      int64_t count, void* dst) {
    const int64_t inner = p.out.inner, keep = p.out.n;
    const float scale = p.scale;
    int64_t base[kLines];
    for (int64_t b = 0; b < count; ++b) base[b] = LineBase(p.out, first + b);
    if (p.real_out) {
      float* d = static_cast<float*>(dst);
      for (int64_t j = 0; j < keep; ++j) {
        for (int64_t b = 0; b < count; ++b) d[base[b] + j * inner] = re[j * kLines + b] * scale;
      }
      return;
    }
    Complex* d = static_cast<Complex*>(dst);
    for (int64_t j = 0; j < keep; ++j) {
      for (int64_t b = 0; b < count; ++b) {
        d[base[b] + j * inner] = Complex(re[j * kLines + b] * scale, im[j * kLines + b] * scale);
      }
    }
  }

  std::vector<std::unique_ptr<FftPlan>> plans_;
  std::vector<Pass> passes_;
  WorkerScratch lines_;
};

// The plan for n and sign among `plans`, made once.
const FftPlan* PlanFor(std::vector<std::unique_ptr<FftPlan>>* plans, int64_t n, int sign,
                       std::vector<int>* signs) {
  for (size_t i = 0; i < plans->size(); ++i) {
    if ((*plans)[i]->size() == n && (*signs)[i] == sign) return (*plans)[i].get();
  }
  plans->push_back(std::make_unique<FftPlan>(n, sign));
  signs->push_back(sign);
  return plans->back().get();
}

// The transformed dims, wrapped, distinct, each of a nonzero size in
// `shape` (none of a 0-dim tensor, unlike WrapDim's one).
absl::StatusOr<std::vector<int>> FftDims(const NodeArgs& args, const TensorMeta& t,
                                         const std::vector<int64_t>& shape, bool need_one) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> list, args.IntList(1, "dim"));
  if (need_one && list.empty()) return args.Error("dim must name at least one dimension");
  if (!list.empty() && t.rank() == 0) {
    return args.Error("a 0-dim tensor has no dimension to transform");
  }
  std::vector<int> dims;
  for (int64_t d : list) {
    KILN_ASSIGN_OR_RETURN(int w, WrapDim(args, d, t.rank()));
    if (std::find(dims.begin(), dims.end(), w) != dims.end()) {
      return args.Error(absl::StrCat("dim ", d, " is listed twice"));
    }
    if (shape[w] < 1) {
      return args.Error(absl::StrCat("invalid number of data points (", shape[w],
                                     ") along dim ", d));
    }
    dims.push_back(w);
  }
  return dims;
}

// 1, 1/sqrt(n) or 1/n for ATen's normalization modes 0, 1 and 2.
absl::StatusOr<float> NormScale(const NodeArgs& args, const std::vector<int64_t>& shape,
                                const std::vector<int>& dims) {
  KILN_ASSIGN_OR_RETURN(int64_t mode, args.Int(2, "normalization"));
  double n = 1;
  for (int d : dims) n *= static_cast<double>(shape[d]);
  switch (mode) {
    case 0: return 1.0f;
    case 1: return static_cast<float>(1.0 / std::sqrt(n));
    case 2: return static_cast<float>(1.0 / n);
  }
  return args.Error(absl::StrCat("normalization ", mode, " is not 0, 1 or 2"));
}

DimLines Lines(const std::vector<int64_t>& shape, int dim) {
  DimLines l;
  l.dim = dim;
  l.outer = Product(shape, 0, dim);
  l.n = shape[dim];
  l.inner = Product(shape, dim + 1, static_cast<int>(shape.size()));
  return l;
}

PreparedOp Finish(const NodeArgs& args, TensorMeta out, std::vector<std::unique_ptr<FftPlan>> plans,
                  std::vector<Pass> passes, int64_t scratch_elements) {
  PreparedOp op;
  op.outputs.push_back(std::move(out));
  if (!args.shape_only()) {
    op.kernel = std::make_unique<FftKernel>(std::move(plans), std::move(passes), scratch_elements);
  }
  return op;
}

class ConjKernel final : public Kernel {
 public:
  explicit ConjKernel(int64_t n) : n_(n) {}
  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = static_cast<const float*>(ctx.inputs[0].data);
    float* out = static_cast<float*>(ctx.outputs[0].data);
    ParallelFor(n_, int64_t{1} << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        out[2 * i] = in[2 * i];
        out[2 * i + 1] = -in[2 * i + 1];
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t n_;
};

PreparedOp ByteCopyAs(const NodeArgs& args, TensorMeta out, int64_t bytes) {
  PreparedOp op;
  op.outputs.push_back(std::move(out));
  if (!args.shape_only()) op.kernel = MakeByteCopyKernel(bytes);
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareFftC2c(const NodeArgs& args) {
  // (self, dim, normalization, forward)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self", DType::kC64));
  KILN_ASSIGN_OR_RETURN(std::vector<int> dims, FftDims(args, self, self.shape, false));
  KILN_ASSIGN_OR_RETURN(float scale, NormScale(args, self.shape, dims));
  KILN_ASSIGN_OR_RETURN(bool forward, args.Bool(3, "forward", true));
  if (dims.empty() || self.NumElements() == 0) {
    return ByteCopyAs(args, self, self.ByteSize());
  }
  std::vector<std::unique_ptr<FftPlan>> plans;
  std::vector<int> signs;
  std::vector<Pass> passes;
  for (size_t i = 0; i < dims.size(); ++i) {
    Pass p;
    if (!args.shape_only()) p.plan = PlanFor(&plans, self.shape[dims[i]], forward ? -1 : 1, &signs);
    p.src = i == 0 ? Buffer::kInput : Buffer::kOutput;
    p.dst = Buffer::kOutput;
    p.in = p.out = Lines(self.shape, dims[i]);
    p.scale = i + 1 == dims.size() ? scale : 1.0f;
    passes.push_back(p);
  }
  return Finish(args, self, std::move(plans), std::move(passes), 0);
}

absl::StatusOr<PreparedOp> PrepareFftR2c(const NodeArgs& args) {
  // (self, dim, normalization, onesided): forward transforms of real
  // input; `onesided` keeps n/2 + 1 values along the last dim listed.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self", DType::kF32));
  KILN_ASSIGN_OR_RETURN(std::vector<int> dims, FftDims(args, self, self.shape, true));
  KILN_ASSIGN_OR_RETURN(float scale, NormScale(args, self.shape, dims));
  KILN_ASSIGN_OR_RETURN(bool onesided, args.Bool(3, "onesided", true));
  const int last = dims.back();
  std::vector<int64_t> out_shape = self.shape;
  if (onesided) out_shape[last] = self.shape[last] / 2 + 1;
  TensorMeta out{DType::kC64, out_shape};
  if (self.NumElements() == 0) return ByteCopyAs(args, out, 0);
  std::vector<std::unique_ptr<FftPlan>> plans;
  std::vector<int> signs;
  std::vector<Pass> passes;
  // The last dim first, from the real input, keeping what the output
  // holds; then every other dim over the output.
  Pass first;
  const int64_t n = self.shape[last];
  first.half = n % 2 == 0;
  if (!args.shape_only()) {
    first.plan = PlanFor(&plans, first.half ? n / 2 : n, -1, &signs);
    if (first.half) {
      auto twiddles = std::make_shared<std::vector<Complex>>(n / 2 + 1);
      for (int64_t k = 0; k <= n / 2; ++k) {
        const double angle = -2.0 * M_PI * static_cast<double>(k) / static_cast<double>(n);
        (*twiddles)[k] = Complex(static_cast<float>(std::cos(angle)),
                                 static_cast<float>(std::sin(angle)));
      }
      first.twiddles = std::move(twiddles);
    }
  }
  first.src = Buffer::kInput;
  first.read = Read::kReal;
  first.in = Lines(self.shape, last);
  first.out = Lines(out_shape, last);
  first.scale = dims.size() == 1 ? scale : 1.0f;
  passes.push_back(first);
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    Pass p;
    if (!args.shape_only()) p.plan = PlanFor(&plans, out_shape[dims[i]], -1, &signs);
    p.src = p.dst = Buffer::kOutput;
    p.in = p.out = Lines(out_shape, dims[i]);
    p.scale = i + 2 == dims.size() ? scale : 1.0f;
    passes.push_back(p);
  }
  return Finish(args, out, std::move(plans), std::move(passes), 0);
}

absl::StatusOr<PreparedOp> PrepareFftC2r(const NodeArgs& args) {
  // (self, dim, normalization, last_dim_size): backward transforms to real
  // output whose last dim listed has last_dim_size values; self holds the
  // first last_dim_size / 2 + 1 of them along it (ATen reads no more).
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self", DType::kC64));
  KILN_ASSIGN_OR_RETURN(int64_t last_size, args.Int(3, "last_dim_size"));
  if (last_size < 1) {
    return args.Error(absl::StrCat("invalid number of data points (", last_size, ")"));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int> dims, FftDims(args, self, self.shape, true));
  const int last = dims.back();
  if (self.shape[last] < last_size / 2 + 1) {
    return args.Error(absl::StrCat("last_dim_size ", last_size, " needs ", last_size / 2 + 1,
                                   " values along dim ", last, " of ", self.ToString()));
  }
  std::vector<int64_t> out_shape = self.shape;
  out_shape[last] = last_size;
  KILN_ASSIGN_OR_RETURN(float scale, NormScale(args, out_shape, dims));
  TensorMeta out{DType::kF32, out_shape};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  if (out.NumElements() == 0) return ByteCopyAs(args, out, 0);
  std::vector<std::unique_ptr<FftPlan>> plans;
  std::vector<int> signs;
  std::vector<Pass> passes;
  // Every dim but the last over a copy of self in scratch (the first
  // reading self itself), then the last from there into the real output.
  const bool staged = dims.size() > 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    Pass p;
    if (!args.shape_only()) p.plan = PlanFor(&plans, self.shape[dims[i]], 1, &signs);
    p.src = i == 0 ? Buffer::kInput : Buffer::kScratch;
    p.dst = Buffer::kScratch;
    p.in = p.out = Lines(self.shape, dims[i]);
    passes.push_back(p);
  }
  Pass final_pass;
  if (!args.shape_only()) final_pass.plan = PlanFor(&plans, last_size, 1, &signs);
  final_pass.src = staged ? Buffer::kScratch : Buffer::kInput;
  final_pass.read = Read::kHermitian;
  final_pass.real_out = true;
  final_pass.in = Lines(self.shape, last);
  final_pass.out = Lines(out_shape, last);
  final_pass.scale = scale;
  passes.push_back(final_pass);
  return Finish(args, out, std::move(plans), std::move(passes),
                staged ? self.NumElements() : 0);
}

absl::StatusOr<PreparedOp> PrepareViewAsReal(const NodeArgs& args) {
  // (self): c64 [...] as f32 [..., 2] with the same bytes.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self", DType::kC64));
  std::vector<int64_t> shape = self.shape;
  shape.push_back(2);
  TensorMeta out{DType::kF32, shape};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  return ByteCopyAs(args, out, self.ByteSize());
}

absl::StatusOr<PreparedOp> PrepareViewAsComplex(const NodeArgs& args) {
  // (self): f32 [..., 2] as c64 [...] with the same bytes.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self", DType::kF32));
  if (self.rank() == 0 || self.shape.back() != 2) {
    return args.Error(absl::StrCat("view_as_complex needs a last dimension of size 2, got ",
                                   self.ToString()));
  }
  std::vector<int64_t> shape(self.shape.begin(), self.shape.end() - 1);
  return ByteCopyAs(args, TensorMeta{DType::kC64, shape}, self.ByteSize());
}

absl::StatusOr<PreparedOp> PrepareConj(const NodeArgs& args) {
  // (self): the complex conjugate; real tensors are their own. ATen's
  // _conj is a lazy view; runtime tensors are dense, so this writes the
  // conjugated values, which is what every reader of that view sees.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  if (self.dtype != DType::kC64) return ByteCopyAs(args, self, self.ByteSize());
  PreparedOp op;
  op.outputs.push_back(self);
  if (!args.shape_only()) op.kernel = std::make_unique<ConjKernel>(self.NumElements());
  return op;
}

absl::StatusOr<PreparedOp> PrepareResolveConj(const NodeArgs& args) {
  // (self): runtime tensors hold their values, never a pending conjugation
  // or negation, so resolving one is a copy.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  return ByteCopyAs(args, self, self.ByteSize());
}

}  // namespace kiln::runtime
