// aten.convolution.default and its fused form kiln.conv2d (bias, residual
// add and activations as oneDNN post-ops; see post_ops.h): 2-D (and 1-D
// as 2-D of height 1), non-transposed, f32, on oneDNN. Transposed and 3-D
// convolutions are conv_general.cc's.
//
// The input and output are plain NCHW, or in one of the activation layouts
// of activation_layout.h (channels-last [N, H, W, C], blocked
// [N, C/8, H, W, 8]) when kiln.conv2d's layout_in / layout_out say so
// (passes/channels_last.cc sets them so that activations stay in the
// layout the kernels compute in). The primitive computes in the blocked
// layout when either side is blocked, else in NHWC; oneDNN picks the
// weights' layout. Constant weights are reordered once at prepare time,
// anything else that differs is reordered per run through scratch memory.
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/kernels/activation_layout.h"
#include "runtime/kernels/conv_general.h"
#include "runtime/kernels/conv_narrow_group.h"
#include "runtime/kernels/conv_weights.h"
#include "runtime/kernels/conv_winograd.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/op_table.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// Depthwise convolutions: oneDNN ranks its brgemm-based kernel
// (brdgmm_dw) first for NHWC, but its direct depthwise kernel at the
// CPU's widest ISA runs the mobilenet / efficientnet shapes faster on the
// CPUs timed (AMD EPYC, AVX2 and AVX-512), most at batch 1, and no slower
// at batch 8. The ISA must be the CPU's own: oneDNN also offers its AVX2
// kernel on an AVX-512 CPU, where it runs at about two thirds of the
// AVX-512 one's rate.
const char* PreferredDepthwiseImpl() {
  return HasAvx512Kernels() ? "jit_dw:avx512_core" : "jit_dw:avx2";
}

// 1x1 convolutions in NHWC on AVX2: oneDNN ranks brgconv_1x1 first, but
// its jit_1x1 kernel (the one it uses for blocked layouts) takes NHWC too
// and ran all but one of the shapes timed faster (2 threads, with a ReLU
// post-op; resnext50's and shufflenet's among them); the exception, a
// wide-to-narrow one on a small map at batch 8, lost a little. On AVX-512
// CPUs oneDNN's first choice (brgconv_1x1:avx512_core) is kept: it was the
// fastest or within a few percent of it on every shape timed, and the
// AVX2 kernel oneDNN still offers there runs at half its rate.
// KILN_JIT_1X1=0 keeps oneDNN's order on AVX2 too
// (bench/models/switch_ab.py --var KILN_JIT_1X1 compares whole models).
constexpr const char* kPreferredPointwiseImpl = "jit_1x1:avx2";

bool PreferJit1x1() {
  static const bool on = !HasAvx512Kernels() && KernelSwitchOn("KILN_JIT_1X1");
  return on;
}

// Moves `pd` to the implementation named `impl` when oneDNN offers it for
// this problem. False when it does not, leaving `pd` on its last
// implementation (the caller builds it again).
bool SelectImpl(dnnl::convolution_forward::primitive_desc& pd, const char* impl) {
  do {
    if (std::strcmp(pd.impl_info_str(), impl) == 0) return true;
  } while (pd.next_impl());
  return false;
}

class ConvolutionKernel final : public Kernel {
 public:
  struct Config {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward conv;
    // Plain (NCHW / NHWC) layouts of the node's activations.
    memory::desc src_md, dst_md;
    int input_index = -1;
    ConvWeights weights;  // OIHW / GOIHW as the node gives them
    // Residual of the fused "add" (sum) post-op: its input slot, and the
    // reorder that places it in a blocked destination.
    int residual_index = -1;
    std::optional<dnnl::reorder> residual_reorder;
    dnnl::reorder::primitive_desc residual_pd;
    size_t residual_pad_offset = 0;
    // The "channel_affine" post-op's operands (copies of the constants)
    // and the chain position of its binary mul; -1: none.
    std::vector<float> channel_scale, channel_shift;
    int channel_affine_index = -1;
    bool empty = false;  // zero-sized batch: nothing to compute
    // Present when the primitive wants a blocked layout for that tensor.
    std::optional<ScratchReorder> src_reorder, dst_reorder;
    // Scratch: [conv scratchpad | staged tensors and reorder pads].
    size_t scratch_bytes = 0;
  };

  explicit ConvolutionKernel(Config c) : c_(std::move(c)) {}

  size_t ScratchBytes() const override { return c_.scratch_bytes; }

  absl::Status Run(const KernelContext& ctx) const override {
    if (c_.empty) return absl::OkStatus();
    return RunDnnl("convolution", [&]() -> absl::Status {
      const dnnl::engine& engine = CpuEngine();
      char* scratch = static_cast<char*>(ctx.scratch);
      dnnl::stream stream(engine);
      memory user_src(c_.src_md, engine, ctx.inputs[c_.input_index].data);
      memory user_dst(c_.dst_md, engine, ctx.outputs[0].data);
      memory src = user_src, dst = user_dst;
      if (c_.src_reorder) src = c_.src_reorder->Run(stream, user_src, scratch);
      if (c_.dst_reorder) dst = c_.dst_reorder->Staging(scratch);
      std::unordered_map<int, memory> exec_args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
      c_.weights.AddArgs(ctx, stream, scratch, &exec_args);
      // The executor may pass no scratch at all when none was asked for.
      if (c_.pd.scratchpad_desc().get_size() > 0) {
        exec_args[DNNL_ARG_SCRATCHPAD] =
            memory(c_.pd.scratchpad_desc(), engine, scratch);
      }
      if (c_.channel_affine_index >= 0) {
        // oneDNN only reads binary operands; its memory takes a non-const
        // handle.
        const memory::desc md = ChannelAffineDesc(static_cast<int64_t>(c_.channel_scale.size()));
        exec_args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(c_.channel_affine_index) | DNNL_ARG_SRC_1] =
            memory(md, engine, const_cast<float*>(c_.channel_scale.data()));
        exec_args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(c_.channel_affine_index + 1) | DNNL_ARG_SRC_1] =
            memory(md, engine, const_cast<float*>(c_.channel_shift.data()));
      }
      if (c_.residual_index >= 0) {
        // The sum post-op adds to what the destination holds.
        void* residual = ctx.inputs[c_.residual_index].data;
        if (c_.residual_reorder) {
          memory from(c_.dst_md, engine, residual);
          std::unordered_map<int, memory> rargs = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, dst}};
          const memory::desc pad_md = c_.residual_pd.scratchpad_desc();
          if (pad_md.get_size() > 0) {
            rargs[DNNL_ARG_SCRATCHPAD] = memory(pad_md, engine, scratch + c_.residual_pad_offset);
          }
          c_.residual_reorder->execute(stream, rargs);
        } else if (residual != ctx.outputs[0].data) {
          std::memcpy(ctx.outputs[0].data, residual, c_.dst_md.get_size());
        }
      }
      c_.conv.execute(stream, exec_args);
      if (c_.dst_reorder) c_.dst_reorder->Execute(stream, dst, user_dst, scratch);
      stream.wait();
      return absl::OkStatus();
    });
  }

 private:
  Config c_;
};

}  // namespace

// kiln.conv2d's own arguments (ops.def); the layouts are ActivationLayout
// values.
// Both ops share positions 0-5 (input, weight, bias, stride, padding,
// dilation); aten.convolution continues (transposed, output_padding,
// groups).
static_assert(KILN_ARG("kiln.conv2d", "input").pos == 0 &&
                  KILN_ARG("kiln.conv2d", "weight").pos == 1 &&
                  KILN_ARG("kiln.conv2d", "bias").pos == 2 &&
                  KILN_ARG("kiln.conv2d", "stride").pos == 3 &&
                  KILN_ARG("kiln.conv2d", "padding").pos == 4 &&
                  KILN_ARG("kiln.conv2d", "dilation").pos == 5,
              "kiln.conv2d starts with aten.convolution's arguments");

static absl::StatusOr<PreparedOp> PrepareConv(const NodeArgs& args, bool fused) {
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "input"));
  KILN_ASSIGN_OR_RETURN(TensorMeta weight, args.Tensor(1, "weight"));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias,
                        args.OptionalTensor(2, "bias"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> stride_list,
                        args.IntList(3, "stride"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> padding_list,
                        args.IntList(4, "padding"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dilation_list,
                        args.IntList(5, "dilation"));
  bool transposed = false;
  std::vector<int64_t> output_padding = {0};
  int64_t groups = 1;
  std::vector<PostOp> post_ops;
  std::optional<TensorMeta> residual, channel_scale, channel_shift;
  ActivationLayout layout_in = ActivationLayout::kPlain, layout_out = ActivationLayout::kPlain;
  if (fused) {
    KILN_ASSIGN_OR_RETURN(groups, args.Int(conv2d_arg::kGroups, 1));
    KILN_ASSIGN_OR_RETURN(residual, args.OptionalTensor(conv2d_arg::kResidual));
    KILN_ASSIGN_OR_RETURN(post_ops, ParsePostOps(args, conv2d_arg::kPostOps, /*channel_affine=*/true));
    KILN_ASSIGN_OR_RETURN(channel_scale, args.OptionalTensor(conv2d_arg::kChannelScale));
    KILN_ASSIGN_OR_RETURN(channel_shift, args.OptionalTensor(conv2d_arg::kChannelShift));
    KILN_ASSIGN_OR_RETURN(int64_t in_code, args.Int(conv2d_arg::kLayoutIn, 0));
    KILN_ASSIGN_OR_RETURN(int64_t out_code, args.Int(conv2d_arg::kLayoutOut, 0));
    for (int64_t code : {in_code, out_code}) {
      if (code < 0 || code > static_cast<int64_t>(ActivationLayout::kBlocked)) {
        return args.Error(absl::StrCat("unknown activation layout ", code));
      }
    }
    layout_in = static_cast<ActivationLayout>(in_code);
    layout_out = static_cast<ActivationLayout>(out_code);
  } else {
    KILN_ASSIGN_OR_RETURN(transposed, args.Bool(6, "transposed", false));
    KILN_ASSIGN_OR_RETURN(output_padding, args.IntList(7, "output_padding", {0}));
    KILN_ASSIGN_OR_RETURN(groups, args.Int(8, "groups", 1));
  }

  if (!fused && IsGeneralConvolution(input, transposed)) return PrepareGeneralConvolution(args);
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "input"));
  KILN_RETURN_IF_ERROR(RequireDType(args, weight, "weight"));
  if (bias) KILN_RETURN_IF_ERROR(RequireDType(args, *bias, "bias"));
  // A 1-D convolution ([N, C, L] input, [O, I, K] weight) is the 2-D one
  // of height 1 over the same bytes; its output drops the height again.
  const bool one_d = input.rank() == 3 && layout_in == ActivationLayout::kPlain &&
                     layout_out == ActivationLayout::kPlain;
  if (one_d) {
    if (weight.rank() != 3) {
      return args.Error(absl::StrCat("weight must be 3-D (OIK) for a 3-D input, got ",
                                     weight.ToString()));
    }
    for (auto* list : {&stride_list, &padding_list, &dilation_list}) {
      if (list->size() != 1) {
        return args.Error(absl::StrCat("stride, padding and dilation of a 1-D convolution "
                                       "take one value each, got ", ShapeString(*list)));
      }
    }
    input.shape.insert(input.shape.begin() + 2, 1);
    weight.shape.insert(weight.shape.begin() + 2, 1);
    stride_list = {1, stride_list[0]};
    padding_list = {0, padding_list[0]};
    dilation_list = {1, dilation_list[0]};
  }
  const std::vector<int64_t> in_nchw = LogicalShape(input.shape, layout_in);
  if (in_nchw.empty()) {
    return args.Unimplemented(absl::StrCat(
        "only 1-D and 2-D convolution (a 3-D or 4-D input) is supported, got ",
        input.ToString(), " in layout ", static_cast<int64_t>(layout_in)));
  }
  if (weight.rank() != 4) {
    return args.Error(absl::StrCat(
        "weight must be 4-D (OIHW) for a 4-D input, got ", weight.ToString()));
  }
  KILN_ASSIGN_OR_RETURN(auto stride, ExpandPair(args, stride_list, "stride"));
  // kiln.conv2d also takes 4 paddings, {top, left, bottom, right}: a zero
  // constant_pad_nd folded into it (passes/fold_conv_padding.cc), which
  // may pad one side more than the other (TensorFlow's "same" padding).
  std::array<int64_t, 2> padding, padding_end;
  if (fused && !one_d && padding_list.size() == 4) {
    padding = {padding_list[0], padding_list[1]};
    padding_end = {padding_list[2], padding_list[3]};
  } else {
    KILN_ASSIGN_OR_RETURN(padding, ExpandPair(args, padding_list, "padding"));
    padding_end = padding;
  }
  KILN_ASSIGN_OR_RETURN(auto dilation,
                        ExpandPair(args, dilation_list, "dilation"));
  for (int64_t op : output_padding) {
    if (op != 0) {
      return args.Error(absl::StrCat(
          "output_padding must be 0 for a non-transposed convolution, got ",
          ShapeString(output_padding)));
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (stride[i] <= 0) {
      return args.Error(absl::StrCat("stride must be positive, got ",
                                     ShapeString(stride_list)));
    }
    if (dilation[i] <= 0) {
      return args.Error(absl::StrCat("dilation must be positive, got ",
                                     ShapeString(dilation_list)));
    }
    if (padding[i] < 0 || padding_end[i] < 0) {
      return args.Error(absl::StrCat("padding must be non-negative, got ",
                                     ShapeString(padding_list)));
    }
  }
  const int64_t n = in_nchw[0], c = in_nchw[1], h = in_nchw[2], w = in_nchw[3];
  const int64_t oc = weight.shape[0], icg = weight.shape[1],
                kh = weight.shape[2], kw = weight.shape[3];
  if (groups <= 0) {
    return args.Error(absl::StrCat("groups must be positive, got ", groups));
  }
  if (c % groups != 0) {
    return args.Error(absl::StrCat("groups (", groups,
                                   ") must divide the input channels (", c,
                                   ")"));
  }
  if (oc % groups != 0) {
    return args.Error(absl::StrCat("groups (", groups,
                                   ") must divide the output channels (", oc,
                                   ")"));
  }
  if (icg * groups != c) {
    return args.Error(absl::StrCat(
        "weight ", weight.ToString(), " expects ", icg * groups,
        " input channels with groups=", groups, ", but input ",
        input.ToString(), " has ", c));
  }
  if (c == 0 || oc == 0 || kh == 0 || kw == 0) {
    return args.Unimplemented(absl::StrCat(
        "convolution with zero channels or an empty kernel: input ",
        input.ToString(), ", weight ", weight.ToString()));
  }
  if (bias && (bias->rank() != 1 || bias->shape[0] != oc)) {
    return args.Error(absl::StrCat("bias must have shape [", oc, "], got ",
                                   bias->ToString()));
  }
  const std::array<int64_t, 2> in_hw = {h, w}, k_hw = {kh, kw};
  std::array<int64_t, 2> out_hw;
  for (int i = 0; i < 2; ++i) {
    const int64_t eff_k = dilation[i] * (k_hw[i] - 1) + 1;
    const int64_t padded = in_hw[i] + padding[i] + padding_end[i];
    if (padded < eff_k) {
      return args.Error(absl::StrCat(
          "padded input size ", padded, " in spatial dim ", i,
          " is smaller than the dilated kernel size ", eff_k, " (input ",
          input.ToString(), ", weight ", weight.ToString(), ")"));
    }
    out_hw[i] = (padded - eff_k) / stride[i] + 1;
  }

  const std::vector<int64_t> out_nchw = {n, oc, out_hw[0], out_hw[1]};
  if (!HasLayoutForm(out_nchw, layout_out)) {
    return args.Error(absl::StrCat("output channels (", oc,
                                   ") must be a multiple of 8 for a blocked output"));
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, LayoutShape(out_nchw, layout_out)});
  if (one_d) op.outputs[0].shape.erase(op.outputs[0].shape.begin() + 2);
  int adds = 0;
  for (const PostOp& p : post_ops) adds += p.kind == PostOp::Kind::kAdd;
  if (adds != (residual ? 1 : 0)) {
    return args.Error("a residual needs exactly one \"add\" post-op and vice versa");
  }
  if (residual && *residual != op.outputs[0]) {
    return args.Error(absl::StrCat("residual ", residual->ToString(),
                                   " must match the output ", op.outputs[0].ToString()));
  }
  int affines = 0;
  for (const PostOp& p : post_ops) affines += p.kind == PostOp::Kind::kChannelAffine;
  if (affines > 1 || (affines == 1) != (channel_scale.has_value() && channel_shift.has_value()) ||
      (affines == 0 && (channel_scale || channel_shift))) {
    return args.Error(
        "channel_scale and channel_shift need exactly one \"channel_affine\" post-op and vice "
        "versa");
  }
  const TensorMeta channel_meta{DType::kF32, {oc}};
  for (const auto& t : {channel_scale, channel_shift}) {
    if (t && *t != channel_meta) {
      return args.Error(absl::StrCat("channel_scale and channel_shift must be ",
                                     channel_meta.ToString(), ", got ", t->ToString()));
    }
  }
  if (args.shape_only()) return op;
  ConvolutionKernel::Config cfg;
  cfg.input_index = InputIndex(args, 0, "input");
  if (affines == 1) {
    // Constants only: the operands are copied here, once.
    const auto* scale = static_cast<const float*>(args.ConstantData(conv2d_arg::kChannelScale));
    const auto* shift = static_cast<const float*>(args.ConstantData(conv2d_arg::kChannelShift));
    if (scale == nullptr || shift == nullptr) {
      return args.Unimplemented("channel_scale and channel_shift must be constants");
    }
    CheckBeforePrepareReads(scale);
    CheckBeforePrepareReads(shift);
    cfg.channel_scale.assign(scale, scale + oc);
    cfg.channel_shift.assign(shift, shift + oc);
    cfg.channel_affine_index = DnnlChannelAffineIndex(post_ops);
    op.consumed_constants.push_back(scale);
    op.consumed_constants.push_back(shift);
  }
  const int bias_index = bias ? InputIndex(args, 2, "bias") : -1;
  if (residual) cfg.residual_index = InputIndex(args, conv2d_arg::kResidual);
  if (n == 0) {
    cfg.empty = true;
    op.kernel = std::make_unique<ConvolutionKernel>(std::move(cfg));
    return op;
  }
  const WinogradConvShape wino{n, c, h, w, oc, out_hw[0], out_hw[1], padding[0], padding[1],
                               layout_in, layout_out};
  const void* constant_weight = args.ConstantData(1, "weight");
  const bool symmetric = padding == padding_end;
  if (symmetric &&
      WinogradApplies(wino, kh, kw, stride, dilation, groups, constant_weight != nullptr,
                      ComputeType(args.options()) == dt::f32, post_ops)) {
    const void* constant_bias = bias ? args.ConstantData(2, "bias") : nullptr;
    KILN_ASSIGN_OR_RETURN(
        op.kernel, MakeWinogradConv(args, wino, static_cast<const float*>(constant_weight),
                                    static_cast<const float*>(constant_bias), cfg.input_index,
                                    bias_index, cfg.residual_index, post_ops));
    op.consumed_constants.push_back(constant_weight);
    if (constant_bias != nullptr) op.consumed_constants.push_back(constant_bias);
    return op;
  }

  const NarrowGroupConvShape narrow{n, c, h, w, oc, out_hw[0], out_hw[1], kh, kw, groups,
                                    stride, padding, dilation, layout_in, layout_out};
  if (symmetric && NarrowGroupApplies(narrow, constant_weight != nullptr,
                         ComputeType(args.options()) == dt::f32, post_ops)) {
    const void* constant_bias = bias ? args.ConstantData(2, "bias") : nullptr;
    op.kernel = MakeNarrowGroupConv(narrow, static_cast<const float*>(constant_weight),
                                    static_cast<const float*>(constant_bias), cfg.input_index,
                                    bias_index, cfg.residual_index, post_ops);
    op.consumed_constants.push_back(constant_weight);
    if (constant_bias != nullptr) op.consumed_constants.push_back(constant_bias);
    return op;
  }

  KILN_RETURN_IF_ERROR(BuildDnnl(args, "this convolution", [&]() -> absl::Status {
    const dnnl::engine& engine = CpuEngine();
    cfg.src_md = memory::desc({n, c, h, w}, dt::f32, DnnlTag(layout_in));
    cfg.dst_md = memory::desc({n, oc, out_hw[0], out_hw[1]}, dt::f32, DnnlTag(layout_out));
    memory::dims weight_dims;
    ConvWeights& weights = cfg.weights;
    if (groups == 1) {
      weight_dims = {oc, icg, kh, kw};
      weights.user_md = memory::desc(weight_dims, dt::f32, tag::oihw);
    } else {
      // Same bytes as OIHW: O splits into (G, O/G).
      weight_dims = {groups, oc / groups, icg, kh, kw};
      weights.user_md = memory::desc(weight_dims, dt::f32, tag::goihw);
    }
    const dt compute = ComputeType(args.options());
    const memory::desc any_weights(weight_dims, compute, tag::any);
    // The primitive computes in NHWC, or in the blocked layout when a side
    // is blocked, never in plain NCHW: oneDNN's NHWC and blocked kernels
    // beat its NCHW path (im2col + GEMM) by far more than a per-run reorder
    // of a plain input or output costs, and leaving the layouts to oneDNN
    // (`any`) can land a channels-last input on a slow mixed-layout
    // kernel. A blocked computation reads an input whose channels are no
    // multiple of 8 (an RGB image) in plain NCHW, as oneDNN's AVX2
    // first-layer kernel does.
    const bool blocked =
        layout_in == ActivationLayout::kBlocked || layout_out == ActivationLayout::kBlocked;
    const tag src_tag =
        !blocked ? tag::nhwc : (c % kChannelBlock == 0 ? tag::nChw8c : tag::nchw);
    memory::desc any_src({n, c, h, w}, compute, src_tag);
    memory::desc any_dst({n, oc, out_hw[0], out_hw[1]}, dt::f32,
                         blocked ? tag::nChw8c : tag::nhwc);
    if (bias) weights.bias_md = memory::desc({oc}, dt::f32, tag::x);
    // oneDNN counts dilation from 0 (no gap), ATen from 1.
    const memory::dims strides = {stride[0], stride[1]};
    const memory::dims dil = {dilation[0] - 1, dilation[1] - 1};
    const memory::dims pad = {padding[0], padding[1]};
    const memory::dims pad_end = {padding_end[0], padding_end[1]};
    dnnl::primitive_attr attr = AttrFor(args.options());
    if (!post_ops.empty()) attr.set_post_ops(ToDnnlPostOps(post_ops, oc));
    auto make_pd = [&] {
      return bias ? dnnl::convolution_forward::primitive_desc(
                        engine, dnnl::prop_kind::forward_inference,
                        dnnl::algorithm::convolution_direct, any_src, any_weights, weights.bias_md,
                        any_dst, strides, dil, pad, pad_end, attr)
                  : dnnl::convolution_forward::primitive_desc(
                        engine, dnnl::prop_kind::forward_inference,
                        dnnl::algorithm::convolution_direct, any_src, any_weights, any_dst,
                        strides, dil, pad, pad_end, attr);
    };
    cfg.pd = make_pd();
    if (groups == c && oc == c && compute == dt::f32 &&
        !SelectImpl(cfg.pd, PreferredDepthwiseImpl())) {
      cfg.pd = make_pd();  // the walk left it on the last candidate
    }
    if (groups == 1 && kh == 1 && kw == 1 && !blocked && compute == dt::f32 && PreferJit1x1() &&
        !SelectImpl(cfg.pd, kPreferredPointwiseImpl)) {
      cfg.pd = make_pd();
    }
    if (blocked && std::strncmp(cfg.pd.impl_info_str(), "ref", 3) == 0) {
      // Plain NCHW into a blocked output is a mix oneDNN's AVX2 kernels
      // take only for a first layer; a squeeze-excitation block's 1x1
      // convolutions over 110 or 52 channels (no multiple of 8) fell to
      // its reference kernel, orders of magnitude slower than a jit one
      // for so few products and a visible part of regnet_y_400mf's call.
      // Channels-last both sides instead, with the reorders the code below
      // adds.
      any_src = memory::desc({n, c, h, w}, compute, tag::nhwc);
      any_dst = memory::desc({n, oc, out_hw[0], out_hw[1]}, dt::f32, tag::nhwc);
      cfg.pd = make_pd();
    }
    cfg.conv = dnnl::convolution_forward(cfg.pd);
    size_t scratch = AlignScratch(cfg.pd.scratchpad_desc().get_size());
    if (cfg.pd.src_desc() != cfg.src_md) {
      cfg.src_reorder = ScratchReorder::Make(cfg.src_md, cfg.pd.src_desc(), &scratch);
    }
    if (cfg.pd.dst_desc() != cfg.dst_md) {
      cfg.dst_reorder = ScratchReorder::Make(cfg.pd.dst_desc(), cfg.dst_md, &scratch,
                                             ScratchReorder::Staged::kFrom);
      if (residual) {
        dnnl::reorder::primitive_desc rpd(engine, cfg.dst_md, engine, cfg.pd.dst_desc(),
                                          ReentrantAttr());
        cfg.residual_reorder = dnnl::reorder(rpd);
        cfg.residual_pd = rpd;
        cfg.residual_pad_offset = scratch;
        scratch += AlignScratch(rpd.scratchpad_desc().get_size());
      }
    }
    weights.Prepare(args, cfg.pd.weights_desc(), &scratch, &op);
    cfg.scratch_bytes = scratch;
    return absl::OkStatus();
  }));
  op.kernel = std::make_unique<ConvolutionKernel>(std::move(cfg));
  return op;
}

absl::StatusOr<PreparedOp> PrepareConvolution(const NodeArgs& args) {
  return PrepareConv(args, /*fused=*/false);
}

absl::StatusOr<PreparedOp> PrepareFusedConv2d(const NodeArgs& args) {
  return PrepareConv(args, /*fused=*/true);
}

}  // namespace kiln::runtime
