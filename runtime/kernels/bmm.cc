// aten.bmm.default on f32: [B, M, K] x [B, K, N] -> [B, M, N] with one
// oneDNN batched matmul primitive (kiln.bmm: the same, its operands
// strided windows of its inputs, read where they lie) (built once at prepare time, run with the
// executor's scratch so concurrent runs are safe); a single product with a
// constant mat2 goes to the matmul kernel (matmul.h). Empty problems write
// zeros (K == 0) or nothing. With precision bf16 both operands are
// converted to bf16 in run scratch and the product comes out in f32.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

class BmmKernel final : public Kernel {
 public:
  // a_md, b_md, c_md: the f32 operands as they lie in memory, the first
  // element of each operand a_offset / b_offset bytes into its input.
  BmmKernel(dnnl::matmul::primitive_desc pd, memory::desc a_md,
            memory::desc b_md, memory::desc c_md, int a_index, int b_index,
            int64_t a_offset = 0, int64_t b_offset = 0)
      : pd_(std::move(pd)),
        prim_(pd_),
        a_md_(std::move(a_md)),
        b_md_(std::move(b_md)),
        c_md_(std::move(c_md)),
        a_index_(a_index),
        b_index_(b_index),
        a_offset_(a_offset),
        b_offset_(b_offset) {
    scratch_bytes_ = pd_.scratchpad_desc().get_size();
    if (pd_.src_desc() != a_md_) {
      a_convert_ = ScratchReorder::Make(a_md_, pd_.src_desc(), &scratch_bytes_);
    }
    if (pd_.weights_desc() != b_md_) {
      b_convert_ = ScratchReorder::Make(b_md_, pd_.weights_desc(), &scratch_bytes_);
    }
  }

  size_t ScratchBytes() const override { return scratch_bytes_; }

  absl::Status Run(const KernelContext& ctx) const override {
    return RunDnnl("bmm", [&]() -> absl::Status {
      const dnnl::engine& engine = CpuEngine();
      char* scratch = static_cast<char*>(ctx.scratch);
      dnnl::stream stream(engine);
      memory a(a_md_, engine, static_cast<char*>(ctx.inputs[a_index_].data) + a_offset_);
      memory b(b_md_, engine, static_cast<char*>(ctx.inputs[b_index_].data) + b_offset_);
      if (a_convert_) a = a_convert_->Run(stream, a, scratch);
      if (b_convert_) b = b_convert_->Run(stream, b, scratch);
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, a},
          {DNNL_ARG_WEIGHTS, b},
          {DNNL_ARG_DST, memory(c_md_, engine, ctx.outputs[0].data)}};
      if (pd_.scratchpad_desc().get_size() > 0) {
        args.emplace(DNNL_ARG_SCRATCHPAD,
                     memory(pd_.scratchpad_desc(), engine, ctx.scratch));
      }
      prim_.execute(stream, args);
      stream.wait();
      return absl::OkStatus();
    });
  }

 private:
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  memory::desc a_md_, b_md_, c_md_;
  int a_index_, b_index_;
  int64_t a_offset_, b_offset_;
  // bf16 compute: per-run conversions into scratch, after the scratchpad.
  std::optional<ScratchReorder> a_convert_, b_convert_;
  size_t scratch_bytes_ = 0;
};

// For problems oneDNN cannot describe (a zero-sized dim): zeros when K is 0.
class ZeroFillKernel final : public Kernel {
 public:
  explicit ZeroFillKernel(int64_t n) : n_(n) {}
  absl::Status Run(const KernelContext& ctx) const override {
    if (n_ > 0) std::memset(ctx.outputs[0].data, 0, n_ * sizeof(float));
    return absl::OkStatus();
  }

 private:
  int64_t n_;
};

}  // namespace

namespace {

// One operand of a product: [B, rows, cols] as it lies in its input,
// strides and offset in elements.
struct Operand {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

// Input `pos` as a dense 3-D operand, or, when argument `view_pos` is a
// view (kiln.bmm), the strided window of it that view names. Every
// element the view reads must lie within the input.
absl::StatusOr<Operand> ReadOperand(const NodeArgs& args, int pos, const char* name,
                                    int view_pos, const char* view_name) {
  KILN_ASSIGN_OR_RETURN(TensorMeta t, args.Tensor(pos, name));
  KILN_RETURN_IF_ERROR(RequireDType(args, t, name));
  const Arg* view = view_pos < 0 ? nullptr : args.Find(view_pos, view_name);
  if (view == nullptr || view->kind == Arg::Kind::kNone) {
    if (t.rank() != 3) {
      return args.Error(absl::StrCat("bmm expects 3-D tensors, got ", name, " ", t.ToString()));
    }
    return Operand{t.shape, ContiguousStrides(t.shape), 0};
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, args.IntList(view_pos, view_name));
  if (v.size() != 7) {
    return args.Error(absl::StrCat(view_name, " must be 3 sizes, 3 strides and an offset"));
  }
  Operand op{{v[0], v[1], v[2]}, {v[3], v[4], v[5]}, v[6]};
  int64_t last = op.offset;
  bool empty = false;
  for (int d = 0; d < 3; ++d) {
    if (op.sizes[d] < 0 || op.strides[d] < 1) {
      return args.Error(absl::StrCat(view_name, " needs sizes >= 0 and strides >= 1"));
    }
    empty = empty || op.sizes[d] == 0;
    if (op.sizes[d] > 0) last += (op.sizes[d] - 1) * op.strides[d];
  }
  if (op.offset < 0 || (!empty && last >= t.NumElements())) {
    return args.Error(absl::StrCat(view_name, " reads past the ", t.NumElements(),
                                   " elements of ", name, " ", t.ToString()));
  }
  return op;
}

bool IsReference(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

absl::StatusOr<PreparedOp> PrepareProduct(const NodeArgs& args, const Operand& a,
                                          const Operand& b, bool may_pack_constant) {
  if (a.sizes[0] != b.sizes[0] || a.sizes[2] != b.sizes[1]) {
    return args.Error(absl::StrCat("bmm shapes ", ShapeString(a.sizes), " and ",
                                   ShapeString(b.sizes), " do not match"));
  }
  const int64_t batch = a.sizes[0], m = a.sizes[1], k = a.sizes[2], n = b.sizes[2];
  TensorMeta out{DType::kF32, {batch, m, n}};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  PreparedOp op;
  op.outputs.push_back(out);
  if (batch == 0 || m == 0 || n == 0 || k == 0) {
    op.kernel = std::make_unique<ZeroFillKernel>(out.NumElements());
    return op;
  }
  // One product against a constant (an einsum with a weight): the matmul
  // kernel packs the weight once, where the batched primitive would read
  // it as it lies on every call.
  if (may_pack_constant && batch == 1 && args.ConstantData(1, "mat2") != nullptr) {
    return PrepareBatchOneMatmulOfConstant(args, m, k, n);
  }
  auto build = [&](dt compute) -> absl::Status {
    return BuildDnnl(args, "this bmm", [&]() -> absl::Status {
      const dnnl::engine& engine = CpuEngine();
      memory::desc a_md(a.sizes, dt::f32, a.strides);
      memory::desc b_md(b.sizes, dt::f32, b.strides);
      memory::desc c_md({batch, m, n}, dt::f32, tag::abc);
      auto plain = [&] {
        return dnnl::matmul::primitive_desc(
            engine, memory::desc({batch, m, k}, compute, tag::abc),
            memory::desc({batch, k, n}, compute, tag::abc), c_md, AttrFor(args.options()));
      };
      dnnl::matmul::primitive_desc pd = plain();
      if (compute == dt::f32 && (a_md != pd.src_desc() || b_md != pd.weights_desc())) {
        // Strided operands read where they lie, unless only oneDNN's
        // reference kernel takes them: then copied into scratch first.
        dnnl::matmul::primitive_desc strided(engine, a_md, b_md, c_md, AttrFor(args.options()));
        if (!IsReference(strided)) pd = std::move(strided);
      }
      op.kernel = std::make_unique<BmmKernel>(
          std::move(pd), a_md, b_md, c_md, InputIndex(args, 0, "self"),
          InputIndex(args, 1, "mat2"), a.offset * int64_t{sizeof(float)},
          b.offset * int64_t{sizeof(float)});
      return absl::OkStatus();
    });
  };
  const dt compute = ComputeType(args.options());
  absl::Status built = build(compute);
  if (!built.ok() && compute != dt::f32) built = build(dt::f32);
  KILN_RETURN_IF_ERROR(built);
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareBmm(const NodeArgs& args) {
  // (self [B, M, K], mat2 [B, K, N])
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self", -1, nullptr));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "mat2", -1, nullptr));
  return PrepareProduct(args, a, b, /*may_pack_constant=*/true);
}

absl::StatusOr<PreparedOp> PrepareStridedBmm(const NodeArgs& args) {
  // (self, mat2, self_view, mat2_view): aten.bmm of strided windows of its
  // inputs (passes/compose_views.cc).
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self", 2, "self_view"));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "mat2", 3, "mat2_view"));
  return PrepareProduct(args, a, b, /*may_pack_constant=*/false);
}

}  // namespace kiln::runtime
