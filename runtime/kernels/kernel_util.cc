// Helpers shared by the ops' prepare functions (see kernel_util.h).
#include "runtime/kernels/kernel_util.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/exec/parallel.h"
#include "runtime/ir/graph.h"
#include "runtime/kernels/strided_loop.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

absl::Status RequireDType(const NodeArgs& args, const TensorMeta& meta,
                          const char* what, DType dtype) {
  if (meta.dtype == dtype) return absl::OkStatus();
  return args.Error(absl::StrCat(what, " must be ",
                                 std::string(DTypeName(dtype)), ", got ",
                                 meta.ToString()));
}

absl::Status RequireMovable(const NodeArgs& args, const TensorMeta& meta, const char* what) {
  if ((DTypeBit(meta.dtype) & kMovable) != 0 && meta.dtype != DType::kInvalid) {
    return absl::OkStatus();
  }
  return args.Error(absl::StrCat(what, " must have a runtime dtype, got ", meta.ToString()));
}

namespace {

constexpr int64_t kCopyGrainBytes = int64_t{1} << 18;

class ByteCopyKernel final : public Kernel {
 public:
  explicit ByteCopyKernel(int64_t bytes) : bytes_(bytes) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const char* src = static_cast<const char*>(ctx.inputs[0].data);
    char* dst = static_cast<char*>(ctx.outputs[0].data);
    if (src == dst || bytes_ <= 0) return absl::OkStatus();
    ParallelFor(bytes_, kCopyGrainBytes, [&](int64_t b, int64_t e) {
      std::memcpy(dst + b, src + b, e - b);
    });
    return absl::OkStatus();
  }

 private:
  int64_t bytes_;
};

// out = in read through `plan`, starting `offset` elements into the input.
class StridedReadKernel final : public Kernel {
 public:
  StridedReadKernel(StridedPlan plan, int elem_size, int64_t offset)
      : plan_(std::move(plan)), elem_size_(elem_size), offset_(offset) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const char* in = static_cast<const char*>(ctx.inputs[0].data);
    StridedCopy(plan_, elem_size_, in + offset_ * elem_size_, ctx.outputs[0].data);
    return absl::OkStatus();
  }

 private:
  StridedPlan plan_;
  int elem_size_;
  int64_t offset_;
};

}  // namespace

std::unique_ptr<Kernel> MakeByteCopyKernel(int64_t bytes) {
  return std::make_unique<ByteCopyKernel>(bytes);
}

PreparedOp CopyAs(const TensorMeta& in, std::vector<int64_t> shape) {
  PreparedOp op;
  op.outputs.push_back(TensorMeta{in.dtype, std::move(shape)});
  op.kernel = MakeByteCopyKernel(in.ByteSize());
  return op;
}

PreparedOp StridedRead(const TensorMeta& in, std::vector<int64_t> shape,
                       const std::vector<int64_t>& strides, int64_t offset) {
  PreparedOp op;
  op.outputs.push_back(TensorMeta{in.dtype, shape});
  op.kernel = std::make_unique<StridedReadKernel>(
      MakeStridedPlan(shape, {strides}), static_cast<int>(ElementSize(in.dtype)), offset);
  return op;
}

bool KernelSwitchOn(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::string(value) != "0";
}

int InputIndex(const NodeArgs& args, int pos, const char* name) {
  const Arg* target = args.Find(pos, name);
  if (target == nullptr || (target->kind != Arg::Kind::kTensor &&
                            target->kind != Arg::Kind::kList)) {
    return -1;
  }
  const Node& node = args.node();
  int index = 0;
  std::vector<ValueRef> refs;
  auto visit = [&](const Arg& arg) -> bool {
    if (&arg == target) return true;
    refs.clear();
    CollectTensorRefs(arg, &refs);
    index += static_cast<int>(refs.size());
    return false;
  };
  for (const Arg& a : node.args) {
    if (visit(a)) return index;
  }
  for (const NamedArg& a : node.kwargs) {
    if (visit(a.value)) return index;
  }
  return -1;
}

absl::StatusOr<int> WrapDim(const NodeArgs& args, int64_t dim, int rank) {
  const int64_t r = rank == 0 ? 1 : rank;
  if (dim < -r || dim >= r) {
    return args.Error(absl::StrCat("dimension ", dim,
                                   " is out of range for a tensor of rank ",
                                   rank, " (expected [", -r, ", ", r - 1,
                                   "])"));
  }
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

absl::StatusOr<std::vector<int64_t>> ExpandList(const NodeArgs& args,
                                                const std::vector<int64_t>& values, int n,
                                                const char* name) {
  if (values.size() == 1) return std::vector<int64_t>(n, values[0]);
  if (static_cast<int>(values.size()) == n) return values;
  return args.Error(absl::StrCat(name, " ", ShapeString(values), " must have one value or ", n));
}

absl::StatusOr<DimLines> LinesAlong(const NodeArgs& args, const TensorMeta& t, int64_t dim) {
  DimLines l;
  KILN_ASSIGN_OR_RETURN(l.dim, WrapDim(args, dim, t.rank()));
  if (t.rank() > 0) {
    l.outer = Product(t.shape, 0, l.dim);
    l.n = t.shape[l.dim];
    l.inner = Product(t.shape, l.dim + 1, t.rank());
  }
  return l;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int64_t Product(const std::vector<int64_t>& shape, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= shape[i];
  return p;
}

}  // namespace kiln::runtime
