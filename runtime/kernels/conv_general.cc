// Transposed convolutions (1-D, 2-D, 3-D) and 3-D convolutions on oneDNN's
// deconvolution and convolution primitives, f32. Activations stay in
// their plain layouts (NCW, NCHW, NCDHW); oneDNN picks the weights'
// layout, constant weights are packed into it once at prepare time and
// others reordered per run through scratch.
//
// A transposed convolution's weight is ATen's [C_in, C_out / groups, k...],
// which is oneDNN's (g)io(d)(h)w order of the same bytes. ATen's
// output_padding extends the far side only: oneDNN's right padding is
// padding - output_padding. Where that would be negative the output runs
// past every input's reach: the primitive computes the reachable box
// (right padding 0) into scratch, and the run fills the output with the
// bias and copies the box into its corner.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/conv_general.h"
#include "runtime/kernels/conv_weights.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

class GeneralConvKernel final : public Kernel {
 public:
  struct Config {
    dnnl::primitive prim;
    memory::desc pad_md;  // the primitive's scratchpad, at scratch offset 0
    memory::desc src_md, dst_md;
    int input_index = -1;
    bool empty = false;  // nothing to compute (an empty batch or output)
    ConvWeights weights;
    // An output past the inputs' reach: the primitive's destination in
    // scratch (box_md), copied into the output's corner (corner_md).
    bool boxed = false;
    memory::desc box_md, corner_md;
    size_t box_offset = 0;
    std::optional<dnnl::reorder> corner_copy;
    memory::desc corner_pad_md;
    size_t corner_pad_offset = 0;
    int64_t batch = 0, channels = 0, plane = 0;  // output dims for the bias fill
    size_t scratch_bytes = 0;
  };

  explicit GeneralConvKernel(Config c) : c_(std::move(c)) {}

  size_t ScratchBytes() const override { return c_.scratch_bytes; }

  absl::Status Run(const KernelContext& ctx) const override {
    if (c_.empty) return absl::OkStatus();
    return RunDnnl("convolution", [&]() -> absl::Status {
      const dnnl::engine& engine = CpuEngine();
      char* scratch = static_cast<char*>(ctx.scratch);
      dnnl::stream stream(engine);
      const memory dst = c_.boxed ? memory(c_.box_md, engine, scratch + c_.box_offset)
                                  : memory(c_.dst_md, engine, ctx.outputs[0].data);
      std::unordered_map<int, memory> exec_args = {
          {DNNL_ARG_SRC, memory(c_.src_md, engine, ctx.inputs[c_.input_index].data)},
          {DNNL_ARG_DST, dst}};
      if (c_.pad_md.get_size() > 0) {
        exec_args[DNNL_ARG_SCRATCHPAD] = memory(c_.pad_md, engine, scratch);
      }
      c_.weights.AddArgs(ctx, stream, scratch, &exec_args);
      c_.prim.execute(stream, exec_args);
      if (c_.boxed) {
        FillWithBias(ctx);
        std::unordered_map<int, memory> copy_args = {
            {DNNL_ARG_FROM, dst},
            {DNNL_ARG_TO, memory(c_.corner_md, engine, ctx.outputs[0].data)}};
        if (c_.corner_pad_md.get_size() > 0) {
          copy_args[DNNL_ARG_SCRATCHPAD] =
              memory(c_.corner_pad_md, engine, scratch + c_.corner_pad_offset);
        }
        c_.corner_copy->execute(stream, copy_args);
      }
      stream.wait();
      return absl::OkStatus();
    });
  }

 private:
  // Every output element the inputs do not reach holds the bias (or 0).
  void FillWithBias(const KernelContext& ctx) const {
    const ConvWeights& w = c_.weights;
    const float* b = w.bias                 ? static_cast<const float*>(w.bias->get_data_handle())
                     : w.bias_index >= 0 ? ctx.inputs[w.bias_index].as<const float>()
                                         : nullptr;
    float* out = ctx.outputs[0].as<float>();
    for (int64_t i = 0; i < c_.batch * c_.channels; ++i) {
      std::fill(out + i * c_.plane, out + (i + 1) * c_.plane, b ? b[i % c_.channels] : 0.0f);
    }
  }

  Config c_;
};

tag PlainTag(int spatial) {
  return spatial == 1 ? tag::ncw : spatial == 2 ? tag::nchw : tag::ncdhw;
}

// The weight's own layout: (g)oi(d)(h)w for a convolution, (g)io(d)(h)w
// for a transposed one.
tag WeightTag(int spatial, bool grouped, bool transposed) {
  static constexpr tag kTags[2][2][3] = {
      {{tag::oiw, tag::oihw, tag::oidhw}, {tag::goiw, tag::goihw, tag::goidhw}},
      // oneDNN names no 1-D io(w) tags; bac and acbd are those orders.
      {{tag::bac, tag::iohw, tag::iodhw}, {tag::acbd, tag::giohw, tag::giodhw}}};
  return kTags[transposed][grouped][spatial - 1];
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareGeneralConvolution(const NodeArgs& args) {
  // (input, weight, bias, stride, padding, dilation, transposed,
  //  output_padding, groups)
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "input"));
  KILN_ASSIGN_OR_RETURN(TensorMeta weight, args.Tensor(1, "weight"));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias, args.OptionalTensor(2, "bias"));
  KILN_ASSIGN_OR_RETURN(bool transposed, args.Bool(6, "transposed", false));
  KILN_ASSIGN_OR_RETURN(int64_t groups, args.Int(8, "groups", 1));
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "input"));
  KILN_RETURN_IF_ERROR(RequireDType(args, weight, "weight"));
  if (bias) KILN_RETURN_IF_ERROR(RequireDType(args, *bias, "bias"));
  const int sd = input.rank() - 2;
  if (sd < 1 || sd > 3) {
    return args.Unimplemented(absl::StrCat("convolution of a ", input.rank(), "-D input"));
  }
  if (weight.rank() != input.rank()) {
    return args.Error(absl::StrCat("weight ", weight.ToString(), " must have the rank of input ",
                                   input.ToString()));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> l, args.IntList(3, "stride"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> stride, ExpandList(args, l, sd, "stride"));
  KILN_ASSIGN_OR_RETURN(l, args.IntList(4, "padding"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> padding, ExpandList(args, l, sd, "padding"));
  KILN_ASSIGN_OR_RETURN(l, args.IntList(5, "dilation"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dilation, ExpandList(args, l, sd, "dilation"));
  KILN_ASSIGN_OR_RETURN(l, args.IntList(7, "output_padding", {0}));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out_pad, ExpandList(args, l, sd, "output_padding"));
  if (groups <= 0) return args.Error(absl::StrCat("groups must be positive, got ", groups));

  const int64_t n = input.shape[0], c = input.shape[1];
  // Channels: a convolution's weight is [OC, C / g, k...], a transposed
  // one's [C, OC / g, k...].
  const int64_t oc = transposed ? weight.shape[1] * groups : weight.shape[0];
  const int64_t in_per_group = transposed ? weight.shape[0] / groups : weight.shape[1];
  if (c % groups != 0 || oc % groups != 0 || in_per_group * groups != c ||
      (transposed && weight.shape[0] != c)) {
    return args.Error(absl::StrCat("weight ", weight.ToString(), " does not fit input ",
                                   input.ToString(), " with groups=", groups,
                                   transposed ? " (transposed)" : ""));
  }
  if (c == 0 || oc == 0) {
    return args.Unimplemented("convolution with zero channels");
  }
  if (bias && (bias->rank() != 1 || bias->shape[0] != oc)) {
    return args.Error(absl::StrCat("bias must have shape [", oc, "], got ", bias->ToString()));
  }
  std::vector<int64_t> out_shape = {n, oc};
  memory::dims pad_r(sd);
  bool empty = n == 0;
  for (int i = 0; i < sd; ++i) {
    const int64_t in = input.shape[2 + i], k = weight.shape[2 + i];
    if (stride[i] <= 0 || dilation[i] <= 0 || padding[i] < 0 || out_pad[i] < 0) {
      return args.Error("stride and dilation must be positive, padding and output_padding "
                        "non-negative");
    }
    if (k == 0) return args.Unimplemented("convolution with an empty kernel");
    const int64_t span = dilation[i] * (k - 1) + 1;
    int64_t out = 0;
    if (transposed) {
      if (out_pad[i] >= stride[i] && out_pad[i] >= dilation[i]) {
        return args.Error(absl::StrCat("output_padding ", ShapeString(out_pad),
                                       " must be smaller than stride or dilation"));
      }
      out = (in - 1) * stride[i] - 2 * padding[i] + span + out_pad[i];
      pad_r[i] = padding[i] - out_pad[i];
    } else {
      if (out_pad[i] != 0) {
        return args.Error("output_padding must be 0 for a non-transposed convolution");
      }
      const int64_t padded = in + 2 * padding[i];
      if (padded < span) {
        return args.Error(absl::StrCat("padded input size ", padded, " in spatial dim ", i,
                                       " is smaller than the dilated kernel size ", span));
      }
      out = (padded - span) / stride[i] + 1;
      pad_r[i] = padding[i];
    }
    if (out < 0) return args.Error("the output would have a negative size");
    empty = empty || out == 0 || in == 0;
    out_shape.push_back(out);
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, out_shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  if (args.shape_only()) return op;

  GeneralConvKernel::Config cfg;
  cfg.input_index = InputIndex(args, 0, "input");
  if (empty) {
    cfg.empty = true;
    op.kernel = std::make_unique<GeneralConvKernel>(std::move(cfg));
    return op;
  }
  KILN_RETURN_IF_ERROR(BuildDnnl(args, "this convolution", [&]() -> absl::Status {
    const dnnl::engine& engine = CpuEngine();
    cfg.src_md = memory::desc(ToDnnlDims(input.shape), dt::f32, PlainTag(sd));
    cfg.dst_md = memory::desc(ToDnnlDims(out_shape), dt::f32, PlainTag(sd));
    // The box the inputs reach, where right padding would be negative.
    memory::dims box = ToDnnlDims(out_shape);
    for (int i = 0; i < sd; ++i) {
      if (pad_r[i] < 0) {
        box[2 + i] += pad_r[i];
        pad_r[i] = 0;
        cfg.boxed = true;
      }
    }
    const memory::desc prim_dst_md =
        cfg.boxed ? memory::desc(box, dt::f32, PlainTag(sd)) : cfg.dst_md;
    // oneDNN's weight dims are (g, oc / g, ic / g, k...) for both kinds.
    memory::dims wdims;
    if (groups > 1) wdims.push_back(groups);
    wdims.push_back(oc / groups);
    wdims.push_back(c / groups);
    for (int i = 0; i < sd; ++i) wdims.push_back(weight.shape[2 + i]);
    ConvWeights& w = cfg.weights;
    w.user_md = memory::desc(wdims, dt::f32, WeightTag(sd, groups > 1, transposed));
    const memory::desc any_weights(wdims, dt::f32, tag::any);
    if (bias) w.bias_md = memory::desc({oc}, dt::f32, tag::x);
    memory::dims strides(stride.begin(), stride.end()), pad_l(padding.begin(), padding.end());
    memory::dims dil(sd);
    for (int i = 0; i < sd; ++i) dil[i] = dilation[i] - 1;  // oneDNN counts gaps
    const dnnl::primitive_attr attr = AttrFor(args.options());
    memory::desc weights_md;
    if (transposed) {
      dnnl::deconvolution_forward::primitive_desc pd(
          engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
          cfg.src_md, any_weights, w.bias_md, prim_dst_md, strides, dil,
          pad_l, pad_r, attr);
      cfg.prim = dnnl::deconvolution_forward(pd);
      cfg.pad_md = pd.scratchpad_desc();
      weights_md = pd.weights_desc();
    } else {
      dnnl::convolution_forward::primitive_desc pd(
          engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
          cfg.src_md, any_weights, w.bias_md, cfg.dst_md, strides, dil, pad_l,
          pad_r, attr);
      cfg.prim = dnnl::convolution_forward(pd);
      cfg.pad_md = pd.scratchpad_desc();
      weights_md = pd.weights_desc();
    }
    size_t scratch = AlignScratch(cfg.pad_md.get_size());
    if (cfg.boxed) {
      cfg.box_md = prim_dst_md;
      cfg.box_offset = scratch;
      scratch += AlignScratch(cfg.box_md.get_size());
      cfg.corner_md = cfg.dst_md.submemory_desc(box, memory::dims(box.size(), 0));
      dnnl::reorder::primitive_desc rpd(engine, cfg.box_md, engine, cfg.corner_md,
                                        ReentrantAttr());
      cfg.corner_copy = dnnl::reorder(rpd);
      cfg.corner_pad_md = rpd.scratchpad_desc();
      cfg.corner_pad_offset = scratch;
      scratch += AlignScratch(cfg.corner_pad_md.get_size());
      cfg.batch = n;
      cfg.channels = oc;
      cfg.plane = Product(out_shape, 2, static_cast<int>(out_shape.size()));
    }
    w.Prepare(args, weights_md, &scratch, &op);
    cfg.scratch_bytes = scratch;
    return absl::OkStatus();
  }));
  op.kernel = std::make_unique<GeneralConvKernel>(std::move(cfg));
  return op;
}

}  // namespace kiln::runtime
