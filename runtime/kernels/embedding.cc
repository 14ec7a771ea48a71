// Table lookups: aten.embedding.default (f32 weight [N, D], i64 indices of
// any shape -> indices.shape + [D]). An out-of-range index fails the run
// with INVALID_ARGUMENT instead of reading outside the table.
//
// The indices may lie in a client's shared memory, which the client can
// change at any time: they are copied into scratch once, and only that
// copy is checked and used (index.cc does the same).
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

class EmbeddingKernel final : public Kernel {
 public:
  EmbeddingKernel(int64_t rows, int64_t dim, int64_t count, int weight_slot,
                  int index_slot)
      : rows_(rows),
        dim_(dim),
        count_(count),
        weight_slot_(weight_slot),
        index_slot_(index_slot) {}

  size_t ScratchBytes() const override { return count_ * sizeof(int64_t); }

  absl::Status Run(const KernelContext& ctx) const override {
    const float* w = ctx.inputs[weight_slot_].as<const float>();
    int64_t* idx = static_cast<int64_t*>(ctx.scratch);
    if (count_ > 0) {
      std::memcpy(idx, ctx.inputs[index_slot_].data, count_ * sizeof(int64_t));
    }
    float* out = ctx.outputs[0].as<float>();
    for (int64_t i = 0; i < count_; ++i) {
      if (idx[i] < 0 || idx[i] >= rows_) {
        return absl::InvalidArgumentError(
            absl::StrCat("embedding: index ", idx[i], " is out of range for ",
                         "a table of ", rows_, " rows"));
      }
    }
    const int64_t dim = dim_;
    ParallelFor(count_, std::max<int64_t>(1, 4096 / std::max<int64_t>(dim, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t i = b; i < e; ++i) {
                    std::memcpy(out + i * dim, w + idx[i] * dim,
                                dim * sizeof(float));
                  }
                });
    return absl::OkStatus();
  }

 private:
  int64_t rows_, dim_, count_;
  int weight_slot_, index_slot_;
};

}  // namespace

absl::StatusOr<PreparedOp> PrepareEmbedding(const NodeArgs& args) {
  // (weight, indices, padding_idx=-1, scale_grad_by_freq=False,
  //  sparse=False): the last three only matter for gradients.
  KILN_ASSIGN_OR_RETURN(TensorMeta weight, args.Tensor(0, "weight"));
  KILN_ASSIGN_OR_RETURN(TensorMeta indices, args.Tensor(1, "indices"));
  KILN_RETURN_IF_ERROR(RequireDType(args, weight, "weight"));
  KILN_RETURN_IF_ERROR(RequireDType(args, indices, "indices", DType::kI64));
  if (weight.rank() != 2) {
    return args.Error(absl::StrCat("weight must be 2-D, got ",
                                   weight.ToString()));
  }
  std::vector<int64_t> shape = indices.shape;
  shape.push_back(weight.shape[1]);
  TensorMeta out{DType::kF32, shape};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  PreparedOp op;
  op.outputs.push_back(out);
  op.kernel = std::make_unique<EmbeddingKernel>(
      weight.shape[0], weight.shape[1], indices.NumElements(),
      InputIndex(args, 0, "weight"), InputIndex(args, 1, "indices"));
  return op;
}

}  // namespace kiln::runtime
