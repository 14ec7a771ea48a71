// Matrix products on oneDNN matmul: aten.mm.default, aten.addmm.default
// (beta * self + alpha * mat1 @ mat2, self broadcast to [M, N]) and
// aten.linear.default (input [..., K] @ weight[N, K]^T + bias).
//
// A constant right-hand matrix is prepacked at prepare time into the
// primitive's preferred layout; a computed one (e.g. aten.permute of a
// weight) is read in place as a plain row-major matrix.
//
// With precision bf16 (compile options) the product runs on bf16 operands
// with f32 accumulation and an f32 result: the left matrix (and a computed
// right one) is converted into run scratch on every run, a constant right
// matrix once, when it is prepacked.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/broadcast.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/ops/op_table.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/kernels/skinny_matmul.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// out[M, N] = A[M, K] @ B + addend, where B is [K, N] row-major or (for
// linear) [N, K] row-major, and the addend is one of:
//   - nothing;
//   - `self` fused as a oneDNN binary-add post-op (alpha = beta = 1);
//   - `bias` [N] fused as oneDNN bias (linear);
//   - alpha * out + beta * self, applied after the product (other scalars).
struct MatmulSpec {
  int64_t m = 0, k = 0, n = 0;
  bool b_is_nk = false;  // B given as [N, K] (linear's weight)
  int a_index = -1, b_index = -1;
  const void* b_constant = nullptr;
  std::string b_key;  // NodeArgs::ConstantKey of b_constant
  // Addend: a tensor broadcastable to [M, N] (addmm's self, linear's bias).
  int addend_index = -1;
  std::vector<int64_t> addend_shape;
  const void* addend_constant = nullptr;
  bool addend_is_bias = false;  // linear: shape [N] (or [1])
  float alpha = 1.0f, beta = 1.0f;
  // Activations fused by compile passes (kiln.addmm), after the addend.
  std::vector<PostOp> activations;
};

class MatmulKernel final : public Kernel {
 public:
  enum class Epilogue { kNone, kPostOp, kBias, kScaled };

  struct Config {
    MatmulSpec spec;
    Epilogue epilogue = Epilogue::kNone;
    bool use_dnnl = true;  // false when M, N or K is 0
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    // The node's f32 operands as they lie in memory.
    memory::desc a_md, b_md, dst_md, addend_md;
    // bf16 compute: per-run conversions of A and of a computed B.
    std::optional<ScratchReorder> a_convert, b_convert;
    // [primitive scratchpad | converted operands]
    size_t scratch_bytes = 0;
    std::optional<PackedConstant> packed_b;
    std::optional<memory> bias;  // constant bias, copied
    BroadcastPlan addend_plan;   // kScaled: over [M, N] x addend
    // Few rows and a constant B: Kiln's own loops instead of oneDNN.
    std::optional<SkinnyMatmul> skinny;
  };

  explicit MatmulKernel(Config c) : c_(std::move(c)) {}

  size_t ScratchBytes() const override {
    if (c_.skinny) return c_.skinny->ScratchBytes();
    return c_.use_dnnl ? c_.scratch_bytes : 0;
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const MatmulSpec& s = c_.spec;
    float* out = ctx.outputs[0].as<float>();
    const int64_t total = s.m * s.n;
    if (total == 0) return absl::OkStatus();
    if (c_.skinny) {
      c_.skinny->Run(ctx.inputs[s.a_index].as<const float>(),
                     ctx.OptionalF32(s.addend_index),
                     out, ctx.scratch);
      return absl::OkStatus();
    }
    if (!c_.use_dnnl) {
      // K == 0: the product is all zeros.
      std::memset(out, 0, total * sizeof(float));
    } else {
      KILN_RETURN_IF_ERROR(RunDnnl("matmul", [&]() -> absl::Status {
        const dnnl::engine& engine = CpuEngine();
        char* scratch = static_cast<char*>(ctx.scratch);
        dnnl::stream stream(engine);
        memory a(c_.a_md, engine, ctx.inputs[s.a_index].data);
        if (c_.a_convert) a = c_.a_convert->Run(stream, a, scratch);
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_SRC, a}, {DNNL_ARG_DST, memory(c_.dst_md, engine, out)}};
        // The executor may pass no scratch at all when none was asked for.
        if (c_.pd.scratchpad_desc().get_size() > 0) {
          args[DNNL_ARG_SCRATCHPAD] =
              memory(c_.pd.scratchpad_desc(), engine, ctx.scratch);
        }
        if (c_.packed_b) {
          args[DNNL_ARG_WEIGHTS] = c_.packed_b->memory;
        } else {
          memory b(c_.b_md, engine, ctx.inputs[s.b_index].data);
          args[DNNL_ARG_WEIGHTS] = c_.b_convert ? c_.b_convert->Run(stream, b, scratch) : b;
        }
        if (c_.epilogue == Epilogue::kBias) {
          args[DNNL_ARG_BIAS] =
              c_.bias ? *c_.bias
                      : memory(c_.addend_md, engine,
                               ctx.inputs[s.addend_index].data);
        } else if (c_.epilogue == Epilogue::kPostOp) {
          args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = memory(
              c_.addend_md, engine, ctx.inputs[s.addend_index].data);
        }
        c_.prim.execute(stream, args);
        stream.wait();
        return absl::OkStatus();
      }));
    }
    if (c_.epilogue == Epilogue::kScaled) {
      const float alpha = s.alpha, beta = s.beta;
      if (beta == 0.0f || s.addend_index < 0) {
        // ATen ignores self (even NaN/inf) when beta is 0.
        ParallelFor(total, int64_t{1} << 15, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[i] *= alpha;
        });
      } else {
        BroadcastApply(c_.addend_plan, out,
                       ctx.inputs[s.addend_index].as<const float>(), out,
                       [alpha, beta](float p, float self) {
                         return alpha * p + beta * self;
                       });
      }
    }
    return absl::OkStatus();
  }

 private:
  Config c_;
};

// The addend's shape as a 2-D oneDNN operand broadcast against [M, N].
memory::dims Addend2d(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {1, shape[0]};
  return {shape[0], shape[1]};
}

// The oneDNN part of c (given c.epilogue): primitive, operand conversions,
// prepacked constants, computing on `compute` (f32 or bf16) operands.
absl::Status BuildMatmulPrimitive(const NodeArgs& args, const MatmulSpec& s, dt compute,
                                  MatmulKernel::Config& c) {
  return BuildDnnl(args, "this matmul", [&]() -> absl::Status {
    const dnnl::engine& engine = CpuEngine();
    c.a_md = memory::desc({s.m, s.k}, dt::f32, tag::ab);
    c.dst_md = memory::desc({s.m, s.n}, dt::f32, tag::ab);
    // [N, K] row-major is [K, N] column-major ("ba").
    const tag b_tag = s.b_is_nk ? tag::ba : tag::ab;
    c.b_md = memory::desc({s.k, s.n}, dt::f32, b_tag);
    const memory::desc a_pd_md({s.m, s.k}, compute, tag::ab);
    const memory::desc b_pd_md({s.k, s.n}, compute, s.b_constant ? tag::any : b_tag);
    dnnl::primitive_attr attr = AttrFor(args.options());
    memory::desc bias_md;
    if (c.epilogue == MatmulKernel::Epilogue::kBias) {
      c.addend_md = memory::desc(Addend2d(s.addend_shape), dt::f32, tag::ab);
      bias_md = c.addend_md;
    } else if (c.epilogue == MatmulKernel::Epilogue::kPostOp) {
      c.addend_md = memory::desc(Addend2d(s.addend_shape), dt::f32, tag::ab);
    }
    dnnl::post_ops po;
    if (c.epilogue == MatmulKernel::Epilogue::kPostOp) {
      po.append_binary(dnnl::algorithm::binary_add, c.addend_md);
    }
    for (const PostOp& a : s.activations) po.append_eltwise(a.algorithm, a.alpha, a.beta);
    if (po.len() > 0) attr.set_post_ops(po);
    c.pd = dnnl::matmul::primitive_desc(engine, a_pd_md, b_pd_md, bias_md, c.dst_md, attr);
    // Without brgemm (CPUs before AVX-512) oneDNN's matmul is its jit gemm,
    // which for a constant weight picks plain [K, N]. With 16 or more rows
    // and outputs at least as wide as the reduction (QKV and
    // up-projections) the weight kept [N, K] runs faster on AVX2 (bench/
    // kernels BM_Linear, M 32 to 256), in the layer and in whole models
    // (BERT-base). Narrower outputs (down-projections) and single rows
    // (decode steps, where [N, K] made the whole model slower) keep [K, N].
    if (s.b_constant && s.n >= s.k && s.m >= 16 &&
        absl::StartsWith(c.pd.impl_info_str(), "gemm:")) {
      const memory::desc b_nk_md({s.k, s.n}, compute, tag::ba);
      c.pd = dnnl::matmul::primitive_desc(engine, a_pd_md, b_nk_md, bias_md, c.dst_md, attr);
    }
    c.prim = dnnl::matmul(c.pd);
    c.scratch_bytes = c.pd.scratchpad_desc().get_size();
    c.a_convert.reset();
    c.b_convert.reset();
    if (c.pd.src_desc() != c.a_md) {
      c.a_convert = ScratchReorder::Make(c.a_md, c.pd.src_desc(), &c.scratch_bytes);
    }
    if (s.b_constant) {
      c.packed_b = PackConstant(c.b_md, s.b_constant, s.b_key, c.pd.weights_desc());
    } else if (c.pd.weights_desc() != c.b_md) {
      c.b_convert = ScratchReorder::Make(c.b_md, c.pd.weights_desc(), &c.scratch_bytes);
    }
    if (c.epilogue == MatmulKernel::Epilogue::kBias && s.addend_constant) {
      memory b(c.addend_md, engine);
      std::memcpy(b.get_data_handle(), s.addend_constant, c.addend_md.get_size());
      c.bias = b;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<PreparedOp> BuildMatmul(const NodeArgs& args, MatmulSpec s,
                                       std::vector<int64_t> out_shape) {
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, std::move(out_shape)});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  if (args.shape_only()) return op;
  MatmulKernel::Config c;
  const bool has_addend = s.addend_index >= 0;
  const bool unit_scales = s.alpha == 1.0f && s.beta == 1.0f;
  if (!has_addend) {
    c.epilogue = s.alpha == 1.0f ? MatmulKernel::Epilogue::kNone
                                 : MatmulKernel::Epilogue::kScaled;
  } else if (s.beta == 0.0f || !unit_scales || s.k == 0) {
    c.epilogue = MatmulKernel::Epilogue::kScaled;
  } else if (s.addend_is_bias) {
    c.epilogue = MatmulKernel::Epilogue::kBias;
  } else {
    c.epilogue = MatmulKernel::Epilogue::kPostOp;
  }
  if (c.epilogue == MatmulKernel::Epilogue::kScaled && has_addend) {
    c.addend_plan = MakeBroadcastPlan({s.m, s.n}, {s.m, s.n}, s.addend_shape);
  }
  c.use_dnnl = s.m > 0 && s.n > 0 && s.k > 0;
  const bool skinny = c.use_dnnl && s.b_constant != nullptr &&
                      ComputeType(args.options()) == dt::f32 &&
                      c.epilogue != MatmulKernel::Epilogue::kScaled &&
                      SkinnyMatmul::Applies(s.m, s.k, s.n, s.activations);
  if (skinny) {
    const memory::desc b_md({s.k, s.n}, dt::f32, s.b_is_nk ? tag::ba : tag::ab);
    c.skinny = SkinnyMatmul::Make(s.m, s.k, s.n, b_md, s.b_constant, s.b_key);
    c.skinny->activations = s.activations;
    if (s.addend_index >= 0) {
      const memory::dims addend = Addend2d(s.addend_shape);
      c.skinny->has_addend = true;
      c.skinny->addend_row_stride = addend[0] == 1 ? 0 : addend[1];
      c.skinny->addend_col_stride = addend[1] == 1 ? 0 : 1;
      if (s.addend_is_bias && s.addend_constant != nullptr) {
        const float* bias = static_cast<const float*>(s.addend_constant);
        c.skinny->constant_addend.assign(bias, bias + addend[0] * addend[1]);
        op.consumed_constants.push_back(s.addend_constant);
      }
    }
    c.use_dnnl = false;
    op.consumed_constants.push_back(s.b_constant);
  } else if (c.use_dnnl) {
    // bf16 first when asked for; should oneDNN have no bf16 kernel for
    // this combination of bias and post-ops, f32 still gives an answer.
    const dt compute = ComputeType(args.options());
    absl::Status built = BuildMatmulPrimitive(args, s, compute, c);
    if (!built.ok() && compute != dt::f32) built = BuildMatmulPrimitive(args, s, dt::f32, c);
    KILN_RETURN_IF_ERROR(built);
  }
  if (c.packed_b) op.consumed_constants.push_back(s.b_constant);
  if (c.bias) op.consumed_constants.push_back(s.addend_constant);
  c.spec = std::move(s);
  op.kernel = std::make_unique<MatmulKernel>(std::move(c));
  return op;
}

absl::Status RequireMatrix(const NodeArgs& args, const TensorMeta& t,
                           const char* name) {
  KILN_RETURN_IF_ERROR(RequireDType(args, t, name));
  if (t.rank() != 2) {
    return args.Error(
        absl::StrCat(name, " must be a matrix (2-D), got ", t.ToString()));
  }
  return absl::OkStatus();
}

// The product mat1 (arg 1) @ mat2 (arg 2) plus an optional addend `self`
// (arg 0) broadcast to [M, N]: the checks and spec aten.addmm and
// kiln.addmm share (unit scales; callers set alpha, beta, activations).
// `b_is_nk`: mat2 is given transposed, as [N, K].
absl::StatusOr<MatmulSpec> AddmmSpec(const NodeArgs& args, const std::optional<TensorMeta>& self,
                                     bool b_is_nk = false) {
  KILN_ASSIGN_OR_RETURN(TensorMeta a, args.Tensor(1, "mat1"));
  KILN_ASSIGN_OR_RETURN(TensorMeta b, args.Tensor(2, "mat2"));
  if (self) KILN_RETURN_IF_ERROR(RequireDType(args, *self, "self"));
  KILN_RETURN_IF_ERROR(RequireMatrix(args, a, "mat1"));
  KILN_RETURN_IF_ERROR(RequireMatrix(args, b, "mat2"));
  const int64_t b_k = b.shape[b_is_nk ? 1 : 0];
  if (a.shape[1] != b_k) {
    return args.Error(absl::StrCat("cannot multiply ", a.ToString(), " by ", b.ToString(),
                                   b_is_nk ? " transposed" : "", ": inner sizes differ"));
  }
  MatmulSpec s;
  s.m = a.shape[0];
  s.k = a.shape[1];
  s.n = b.shape[b_is_nk ? 0 : 1];
  s.b_is_nk = b_is_nk;
  s.a_index = InputIndex(args, 1, "mat1");
  s.b_index = InputIndex(args, 2, "mat2");
  s.b_constant = args.ConstantData(2, "mat2");
  s.b_key = args.ConstantKey(2, "mat2");
  if (!self) return s;
  const std::vector<int64_t> out = {s.m, s.n};
  if (self->rank() > 2 || BroadcastShapes(self->shape, out) != out) {
    return args.Error(absl::StrCat("self ", self->ToString(),
                                   " does not broadcast to the product's shape ",
                                   ShapeString(out)));
  }
  s.addend_index = InputIndex(args, 0, "self");
  s.addend_shape = self->shape;
  // A [N] self is a bias: oneDNN adds it in the kernel's epilogue.
  if (self->rank() == 1 && self->shape[0] == s.n) {
    s.addend_is_bias = true;
    s.addend_constant = args.ConstantData(0, "self");
  }
  return s;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareMm(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta a, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(TensorMeta b, args.Tensor(1, "mat2"));
  KILN_RETURN_IF_ERROR(RequireMatrix(args, a, "self"));
  KILN_RETURN_IF_ERROR(RequireMatrix(args, b, "mat2"));
  if (a.shape[1] != b.shape[0]) {
    return args.Error(absl::StrCat("cannot multiply ", a.ToString(), " by ",
                                   b.ToString(), ": inner sizes differ"));
  }
  MatmulSpec s;
  s.m = a.shape[0];
  s.k = a.shape[1];
  s.n = b.shape[1];
  s.a_index = InputIndex(args, 0, "self");
  s.b_index = InputIndex(args, 1, "mat2");
  s.b_constant = args.ConstantData(1, "mat2");
  s.b_key = args.ConstantKey(1, "mat2");
  std::vector<int64_t> out = {s.m, s.n};
  return BuildMatmul(args, std::move(s), std::move(out));
}

absl::StatusOr<PreparedOp> PrepareBatchOneMatmulOfConstant(const NodeArgs& args, int64_t m,
                                                           int64_t k, int64_t n) {
  // A [1, K, N] constant holds the bytes of the [K, N] one.
  MatmulSpec s;
  s.m = m;
  s.k = k;
  s.n = n;
  s.a_index = InputIndex(args, 0, "self");
  s.b_index = InputIndex(args, 1, "mat2");
  s.b_constant = args.ConstantData(1, "mat2");
  s.b_key = args.ConstantKey(1, "mat2");
  return BuildMatmul(args, std::move(s), {1, m, n});
}

absl::StatusOr<PreparedOp> PrepareAddmm(const NodeArgs& args) {
  // (self, mat1, mat2, *, beta=1, alpha=1)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(double beta, args.Float(3, "beta", 1.0));
  KILN_ASSIGN_OR_RETURN(double alpha, args.Float(4, "alpha", 1.0));
  KILN_ASSIGN_OR_RETURN(MatmulSpec s, AddmmSpec(args, self));
  s.alpha = static_cast<float>(alpha);
  s.beta = static_cast<float>(beta);
  std::vector<int64_t> out = {s.m, s.n};
  return BuildMatmul(args, std::move(s), std::move(out));
}

// kiln.addmm starts with aten.addmm's arguments, which AddmmSpec reads.
static_assert(KILN_ARG("kiln.addmm", "self").pos == 0 && KILN_ARG("kiln.addmm", "mat1").pos == 1 &&
                  KILN_ARG("kiln.addmm", "mat2").pos == 2,
              "kiln.addmm starts with aten.addmm's arguments");

absl::StatusOr<PreparedOp> PrepareFusedAddmm(const NodeArgs& args) {
  // self? + mat1 @ mat2 (mat2 given as [N, K] when mat2_transposed), then
  // the post-ops (activations only), with unit scales.
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> self,
                        args.OptionalTensor(KILN_ARG("kiln.addmm", "self")));
  KILN_ASSIGN_OR_RETURN(std::vector<PostOp> post_ops,
                        ParsePostOps(args, KILN_ARG("kiln.addmm", "post_ops")));
  KILN_ASSIGN_OR_RETURN(bool transposed,
                        args.Bool(KILN_ARG("kiln.addmm", "mat2_transposed"), false));
  for (const PostOp& p : post_ops) {
    if (p.kind != PostOp::Kind::kEltwise) return args.Error("only activations may follow");
  }
  KILN_ASSIGN_OR_RETURN(MatmulSpec s, AddmmSpec(args, self, transposed));
  s.activations = std::move(post_ops);
  std::vector<int64_t> out = {s.m, s.n};
  return BuildMatmul(args, std::move(s), std::move(out));
}

absl::StatusOr<PreparedOp> PrepareLinear(const NodeArgs& args) {
  // (input, weight, bias=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "input"));
  KILN_ASSIGN_OR_RETURN(TensorMeta weight, args.Tensor(1, "weight"));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias,
                        args.OptionalTensor(2, "bias"));
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "input"));
  KILN_RETURN_IF_ERROR(RequireMatrix(args, weight, "weight"));
  if (input.rank() < 1) {
    return args.Error(absl::StrCat("input must have rank >= 1, got ",
                                   input.ToString()));
  }
  const int64_t k = input.shape.back();
  if (weight.shape[1] != k) {
    return args.Error(absl::StrCat("input ", input.ToString(),
                                   " has ", k, " features but weight ",
                                   weight.ToString(), " expects ",
                                   weight.shape[1]));
  }
  MatmulSpec s;
  s.m = Product(input.shape, 0, input.rank() - 1);
  s.k = k;
  s.n = weight.shape[0];
  s.b_is_nk = true;
  s.a_index = InputIndex(args, 0, "input");
  s.b_index = InputIndex(args, 1, "weight");
  s.b_constant = args.ConstantData(1, "weight");
  s.b_key = args.ConstantKey(1, "weight");
  if (bias) {
    KILN_RETURN_IF_ERROR(RequireDType(args, *bias, "bias"));
    if (bias->rank() > 1 || (bias->NumElements() != s.n &&
                             bias->NumElements() != 1)) {
      return args.Error(absl::StrCat("bias must have shape [", s.n,
                                     "] (or one element), got ",
                                     bias->ToString()));
    }
    s.addend_index = InputIndex(args, 2, "bias");
    s.addend_shape = bias->shape;
    s.addend_constant = args.ConstantData(2, "bias");
    s.addend_is_bias = true;
  }
  std::vector<int64_t> out(input.shape.begin(), input.shape.end() - 1);
  out.push_back(s.n);
  return BuildMatmul(args, std::move(s), std::move(out));
}

}  // namespace kiln::runtime
