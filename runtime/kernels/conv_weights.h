// The weights and bias of a oneDNN convolution or deconvolution as the node
// supplies them, shared by the 2-D kernel (convolution.cc) and the general
// one (conv_general.cc).
//
// Constant weights are packed once, at prepare time, into the layout the
// primitive chose; a constant bias is copied. Otherwise both are read from
// the run's inputs, the weights reordered into run scratch when the
// primitive wants another layout than the node's.
#pragma once

#include <cstddef>
#include <optional>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/kernels/kernel.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

struct ConvWeights {
  dnnl::memory::desc user_md;  // the node's weight layout
  dnnl::memory::desc bias_md;  // empty without a bias
  int weight_index = -1, bias_index = -1;
  std::optional<PackedConstant> packed;
  std::optional<ScratchReorder> reorder;
  std::optional<dnnl::memory> bias;

  // Fills the fields for node argument `weight` (position 1) and, when
  // bias_md is set, `bias` (position 2), for a primitive whose weights are
  // `prim_md`. Scratch for a weight reorder is taken at *scratch_bytes;
  // constants copied here are added to op->consumed_constants.
  void Prepare(const NodeArgs& args, const dnnl::memory::desc& prim_md, size_t* scratch_bytes,
               PreparedOp* op);

  // Adds DNNL_ARG_WEIGHTS (and DNNL_ARG_BIAS) for one run.
  void AddArgs(const KernelContext& ctx, dnnl::stream& stream, char* scratch,
               std::unordered_map<int, dnnl::memory>* exec_args) const;
};

}  // namespace kiln::runtime
