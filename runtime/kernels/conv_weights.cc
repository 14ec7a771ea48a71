#include "runtime/kernels/conv_weights.h"

#include <cstring>

#include "runtime/kernels/kernel_util.h"

namespace kiln::runtime {

void ConvWeights::Prepare(const NodeArgs& args, const dnnl::memory::desc& prim_md,
                          size_t* scratch_bytes, PreparedOp* op) {
  weight_index = InputIndex(args, 1, "weight");
  const bool has_bias = bias_md.get_size() > 0;
  bias_index = has_bias ? InputIndex(args, 2, "bias") : -1;
  if (const void* data = args.ConstantData(1, "weight")) {
    packed = PackConstant(user_md, data, args.ConstantKey(1, "weight"), prim_md);
    op->consumed_constants.push_back(data);
  } else if (prim_md != user_md) {
    reorder = ScratchReorder::Make(user_md, prim_md, scratch_bytes);
  }
  if (const void* data = has_bias ? args.ConstantData(2, "bias") : nullptr) {
    dnnl::memory b(bias_md, CpuEngine());
    std::memcpy(b.get_data_handle(), data, bias_md.get_size());
    bias = b;
    op->consumed_constants.push_back(data);
  }
}

void ConvWeights::AddArgs(const KernelContext& ctx, dnnl::stream& stream, char* scratch,
                          std::unordered_map<int, dnnl::memory>* exec_args) const {
  const dnnl::engine& engine = CpuEngine();
  dnnl::memory weights;
  if (packed) {
    weights = packed->memory;
  } else {
    weights = dnnl::memory(user_md, engine, ctx.inputs[weight_index].data);
    if (reorder) weights = reorder->Run(stream, weights, scratch);
  }
  (*exec_args)[DNNL_ARG_WEIGHTS] = weights;
  if (bias) {
    (*exec_args)[DNNL_ARG_BIAS] = *bias;
  } else if (bias_index >= 0) {
    (*exec_args)[DNNL_ARG_BIAS] = dnnl::memory(bias_md, engine, ctx.inputs[bias_index].data);
  }
}

}  // namespace kiln::runtime
