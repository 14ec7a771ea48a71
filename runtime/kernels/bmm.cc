// aten.bmm.default on f32: [B, M, K] x [B, K, N] -> [B, M, N] with one
// oneDNN batched matmul primitive (built once at prepare time, run with the
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
  // a_md, b_md, c_md: the f32 operands as they lie in memory.
  BmmKernel(dnnl::matmul::primitive_desc pd, memory::desc a_md,
            memory::desc b_md, memory::desc c_md, int a_index, int b_index)
      : pd_(std::move(pd)),
        prim_(pd_),
        a_md_(std::move(a_md)),
        b_md_(std::move(b_md)),
        c_md_(std::move(c_md)),
        a_index_(a_index),
        b_index_(b_index) {
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
      memory a(a_md_, engine, ctx.inputs[a_index_].data);
      memory b(b_md_, engine, ctx.inputs[b_index_].data);
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

absl::StatusOr<PreparedOp> PrepareBmm(const NodeArgs& args) {
  // (self [B, M, K], mat2 [B, K, N])
  KILN_ASSIGN_OR_RETURN(TensorMeta a, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, a, "self"));
  KILN_ASSIGN_OR_RETURN(TensorMeta b, args.Tensor(1, "mat2"));
  KILN_RETURN_IF_ERROR(RequireDType(args, b, "mat2"));
  if (a.rank() != 3 || b.rank() != 3) {
    return args.Error(absl::StrCat("bmm expects 3-D tensors, got ",
                                   a.ToString(), " and ", b.ToString()));
  }
  if (a.shape[0] != b.shape[0] || a.shape[2] != b.shape[1]) {
    return args.Error(absl::StrCat("bmm shapes ", a.ToString(), " and ",
                                   b.ToString(), " do not match"));
  }
  const int64_t batch = a.shape[0], m = a.shape[1], k = a.shape[2],
                n = b.shape[2];
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
  if (batch == 1 && args.ConstantData(1, "mat2") != nullptr) {
    return PrepareBatchOneMatmulOfConstant(args, m, k, n);
  }
  auto build = [&](dt compute) -> absl::Status {
    return BuildDnnl(args, "this bmm", [&]() -> absl::Status {
      const dnnl::engine& engine = CpuEngine();
      memory::desc a_md({batch, m, k}, dt::f32, tag::abc);
      memory::desc b_md({batch, k, n}, dt::f32, tag::abc);
      memory::desc c_md({batch, m, n}, dt::f32, tag::abc);
      dnnl::matmul::primitive_desc pd(engine, memory::desc({batch, m, k}, compute, tag::abc),
                                      memory::desc({batch, k, n}, compute, tag::abc), c_md,
                                      AttrFor(args.options()));
      op.kernel = std::make_unique<BmmKernel>(
          std::move(pd), a_md, b_md, c_md, InputIndex(args, 0, "self"),
          InputIndex(args, 1, "mat2"));
      return absl::OkStatus();
    });
  };
  const dt compute = ComputeType(args.options());
  absl::Status built = build(compute);
  if (!built.ok() && compute != dt::f32) built = build(dt::f32);
  KILN_RETURN_IF_ERROR(built);
  return op;
}

}  // namespace kiln::runtime
