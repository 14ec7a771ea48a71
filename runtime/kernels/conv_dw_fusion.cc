#include "runtime/kernels/conv_dw_fusion.h"

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/op_table.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// The expanded tensor must be at least this large for the fusion to pay
// (see DepthwiseFusionPays).
constexpr int64_t kMinIntermediateBytes = int64_t{4} << 20;

constexpr int64_t kDwKernel = 3, kDwPadding = 1;

constexpr int kDwWeights = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS;
constexpr int kDwBias = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS;

int64_t DwOut(int64_t in, int64_t stride) { return (in + 2 * kDwPadding - kDwKernel) / stride + 1; }

// The fused primitive: source and destination in the shape's layout, weights in
// whatever layout oneDNN picks, both biases present (oneDNN's dw post-op
// always reads one; a missing bias is given as zeros).
dnnl::convolution_forward::primitive_desc FusedPd(const DwFusionShape& s,
                                                  const std::vector<PostOp>& post_ops,
                                                  const std::vector<PostOp>& dw_post_ops,
                                                  const CompileOptions& options) {
  dnnl::post_ops po = ToDnnlPostOps(post_ops);
  po.append_dw(dt::f32, dt::f32, dt::f32, kDwKernel, s.dw_stride, kDwPadding);
  for (const PostOp& op : dw_post_ops) po.append_eltwise(op.algorithm, op.alpha, op.beta);
  dnnl::primitive_attr attr = AttrFor(options);
  attr.set_post_ops(po);
  return dnnl::convolution_forward::primitive_desc(
      CpuEngine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
      memory::desc({s.n, s.c, s.h, s.w}, dt::f32, DnnlTag(s.layout)),
      memory::desc({s.m, s.c, 1, 1}, dt::f32, tag::any), memory::desc({s.m}, dt::f32, tag::x),
      memory::desc({s.n, s.m, s.h, s.w}, dt::f32, DnnlTag(s.layout)), {1, 1}, {0, 0}, {0, 0},
      {0, 0}, attr);
}

bool IsRealFusion(const dnnl::convolution_forward::primitive_desc& pd) {
  // oneDNN's fallback chains the two convolutions through its scratchpad.
  return std::string(pd.impl_info_str()).rfind("ref_fused", 0) != 0;
}

class ConvDwKernel final : public Kernel {
 public:
  struct Config {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward conv;
    memory::desc src_md, dst_md;
    PackedConstant weights, dw_weights;  // prepacked constants
    memory bias, dw_bias;
    int input_index = -1;
  };

  explicit ConvDwKernel(Config c) : c_(std::move(c)) {}

  size_t ScratchBytes() const override { return c_.pd.scratchpad_desc().get_size(); }

  absl::Status Run(const KernelContext& ctx) const override {
    return RunDnnl("fused 1x1 + depthwise convolution", [&]() -> absl::Status {
      const dnnl::engine& engine = CpuEngine();
      dnnl::stream stream(engine);
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, memory(c_.src_md, engine, ctx.inputs[c_.input_index].data)},
          {DNNL_ARG_WEIGHTS, c_.weights.memory},
          {DNNL_ARG_BIAS, c_.bias},
          {kDwWeights, c_.dw_weights.memory},
          {kDwBias, c_.dw_bias},
          {DNNL_ARG_DST, memory(c_.dst_md, engine, ctx.outputs[0].data)}};
      if (c_.pd.scratchpad_desc().get_size() > 0) {
        args[DNNL_ARG_SCRATCHPAD] = memory(c_.pd.scratchpad_desc(), engine, ctx.scratch);
      }
      c_.conv.execute(stream, args);
      stream.wait();
      return absl::OkStatus();
    });
  }

 private:
  Config c_;
};

// A constant bias (or zeros when absent) copied into oneDNN memory of `md`.
memory BiasMemory(const memory::desc& md, const void* data, int64_t n) {
  memory m(md, CpuEngine());
  if (data != nullptr) {
    std::memcpy(m.get_data_handle(), data, n * sizeof(float));
  } else {
    std::memset(m.get_data_handle(), 0, n * sizeof(float));
  }
  return m;
}

}  // namespace

bool DepthwiseFusionPays(const DwFusionShape& shape, const std::vector<PostOp>& post_ops,
                         const std::vector<PostOp>& dw_post_ops, const CompileOptions& options) {
  if (ComputeType(options) != dt::f32) return false;
  if (shape.n * shape.m * shape.h * shape.w * int64_t{sizeof(float)} < kMinIntermediateBytes) {
    return false;
  }
  for (const auto* list : {&post_ops, &dw_post_ops}) {
    for (const PostOp& op : *list) {
      if (op.kind != PostOp::Kind::kEltwise) return false;
    }
  }
  return CatchDnnl([&] { return IsRealFusion(FusedPd(shape, post_ops, dw_post_ops, options)); },
                   [](const dnnl::error&) { return false; });
}

absl::StatusOr<PreparedOp> PrepareConv2dDw(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(conv2d_dw_arg::kInput));
  KILN_ASSIGN_OR_RETURN(TensorMeta weight, args.Tensor(conv2d_dw_arg::kWeight));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias, args.OptionalTensor(conv2d_dw_arg::kBias));
  KILN_ASSIGN_OR_RETURN(std::vector<PostOp> post_ops, ParsePostOps(args, conv2d_dw_arg::kPostOps));
  KILN_ASSIGN_OR_RETURN(TensorMeta dw_weight, args.Tensor(conv2d_dw_arg::kDwWeight));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> dw_bias,
                        args.OptionalTensor(conv2d_dw_arg::kDwBias));
  KILN_ASSIGN_OR_RETURN(int64_t dw_stride, args.Int(conv2d_dw_arg::kDwStride));
  KILN_ASSIGN_OR_RETURN(std::vector<PostOp> dw_post_ops,
                        ParsePostOps(args, conv2d_dw_arg::kDwPostOps));
  KILN_ASSIGN_OR_RETURN(int64_t layout_code,
                        args.Int(conv2d_dw_arg::kLayout,
                                 static_cast<int64_t>(ActivationLayout::kNhwc)));
  if (layout_code != static_cast<int64_t>(ActivationLayout::kNhwc) &&
      layout_code != static_cast<int64_t>(ActivationLayout::kBlocked)) {
    return args.Error(absl::StrCat("layout must be channels-last (1) or blocked (2), got ",
                                   layout_code));
  }
  const auto layout = static_cast<ActivationLayout>(layout_code);
  for (const auto* meta : {&input, &weight, &dw_weight}) {
    KILN_RETURN_IF_ERROR(RequireDType(args, *meta, "tensor"));
  }
  const std::vector<int64_t> in_nchw = LogicalShape(input.shape, layout);
  if (in_nchw.empty() || weight.rank() != 4 || dw_weight.rank() != 4) {
    return args.Error("input must be an activation in `layout`; weight and dw_weight 4-D");
  }
  DwFusionShape s{in_nchw[0], in_nchw[1], in_nchw[2], in_nchw[3], weight.shape[0], dw_stride,
                  layout};
  if (weight.shape != std::vector<int64_t>{s.m, s.c, 1, 1}) {
    return args.Error(absl::StrCat("weight must be [", s.m, ", ", s.c, ", 1, 1], got ",
                                   weight.ToString()));
  }
  if (dw_weight.shape != std::vector<int64_t>{s.m, 1, kDwKernel, kDwKernel}) {
    return args.Error(absl::StrCat("dw_weight must be [", s.m, ", 1, 3, 3], got ",
                                   dw_weight.ToString()));
  }
  for (const auto* b : {&bias, &dw_bias}) {
    if (b->has_value() && ((*b)->rank() != 1 || (*b)->shape[0] != s.m)) {
      return args.Error(absl::StrCat("biases must have shape [", s.m, "]"));
    }
  }
  if (dw_stride != 1 && dw_stride != 2) return args.Error("dw_stride must be 1 or 2");
  if (s.n == 0 || s.h == 0 || s.w == 0 || s.c == 0 || s.m == 0) {
    return args.Unimplemented("empty tensors are not fused");
  }
  for (const auto* list : {&post_ops, &dw_post_ops}) {
    for (const PostOp& op : *list) {
      if (op.kind != PostOp::Kind::kEltwise) return args.Error("only eltwise post-ops fuse here");
    }
  }
  const std::vector<int64_t> out_nchw = {s.n, s.m, DwOut(s.h, dw_stride), DwOut(s.w, dw_stride)};
  if (!HasLayoutForm(out_nchw, layout)) {
    return args.Error("a blocked output needs a multiple of 8 channels");
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, LayoutShape(out_nchw, layout)});
  if (args.shape_only()) return op;

  const void* weight_data = args.ConstantData(conv2d_dw_arg::kWeight);
  const void* dw_weight_data = args.ConstantData(conv2d_dw_arg::kDwWeight);
  const void* bias_data = bias ? args.ConstantData(conv2d_dw_arg::kBias) : nullptr;
  const void* dw_bias_data = dw_bias ? args.ConstantData(conv2d_dw_arg::kDwBias) : nullptr;
  if (weight_data == nullptr || dw_weight_data == nullptr || (bias && bias_data == nullptr) ||
      (dw_bias && dw_bias_data == nullptr)) {
    return args.Unimplemented("weights and biases must be constants");
  }
  ConvDwKernel::Config cfg;
  cfg.input_index = InputIndex(args, conv2d_dw_arg::kInput);
  KILN_RETURN_IF_ERROR(BuildDnnl(args, "this fused convolution", [&]() -> absl::Status {
    cfg.pd = FusedPd(s, post_ops, dw_post_ops, args.options());
    cfg.src_md = memory::desc({s.n, s.c, s.h, s.w}, dt::f32, DnnlTag(layout));
    cfg.dst_md = memory::desc({s.n, s.m, DwOut(s.h, dw_stride), DwOut(s.w, dw_stride)}, dt::f32,
                              DnnlTag(layout));
    if (cfg.pd.src_desc() != cfg.src_md || cfg.pd.dst_desc() != cfg.dst_md) {
      return args.Unimplemented("oneDNN wants a blocked layout for this fused convolution");
    }
    cfg.conv = dnnl::convolution_forward(cfg.pd);
    cfg.weights = PackConstant(memory::desc({s.m, s.c, 1, 1}, dt::f32, tag::oihw), weight_data,
                               args.ConstantKey(conv2d_dw_arg::kWeight), cfg.pd.weights_desc());
    cfg.dw_weights = PackConstant(
        memory::desc({s.m, 1, 1, kDwKernel, kDwKernel}, dt::f32, tag::goihw), dw_weight_data,
        args.ConstantKey(conv2d_dw_arg::kDwWeight),
        cfg.pd.query_md(dnnl::query::exec_arg_md, kDwWeights));
    cfg.bias = BiasMemory(cfg.pd.bias_desc(), bias_data, s.m);
    cfg.dw_bias = BiasMemory(cfg.pd.query_md(dnnl::query::exec_arg_md, kDwBias), dw_bias_data, s.m);
    return absl::OkStatus();
  }));
  // Everything constant was packed or copied.
  for (const void* data : {weight_data, dw_weight_data, bias_data, dw_bias_data}) {
    if (data != nullptr) op.consumed_constants.push_back(data);
  }
  op.kernel = std::make_unique<ConvDwKernel>(std::move(cfg));
  return op;
}

}  // namespace kiln::runtime
