// Operands, promotion and broadcasting for the typed elementwise kernels
// (see typed_elementwise.h).
#include "runtime/kernels/typed_elementwise.h"

#include "absl/strings/str_cat.h"
#include "runtime/kernels/broadcast.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

int Category(DType d) {
  switch (d) {
    case DType::kBool:
      return 0;
    case DType::kI64:
    case DType::kI32:
      return 1;
    default:
      return 2;
  }
}

}  // namespace

absl::StatusOr<Operand> ReadOperand(const NodeArgs& args, int pos,
                                    const char* name, bool allow_i32) {
  const Arg* arg = args.Find(pos, name);
  if (arg == nullptr) {
    return args.Error(absl::StrCat("missing argument ", name));
  }
  Operand op;
  switch (arg->kind) {
    case Arg::Kind::kTensor: {
      KILN_ASSIGN_OR_RETURN(op.meta, args.Tensor(pos, name));
      if (!IsElementwiseDType(op.meta.dtype) && !(allow_i32 && op.meta.dtype == DType::kI32)) {
        return args.Unimplemented(absl::StrCat(
            name, " has dtype ", DTypeName(op.meta.dtype),
            "; only f32, i64 and bool are supported"));
      }
      op.is_tensor = true;
      op.dtype = op.meta.dtype;
      op.slot = InputIndex(args, pos, name);
      return op;
    }
    case Arg::Kind::kFloat:
      op.dtype = DType::kF32;
      op.f = arg->f;
      return op;
    case Arg::Kind::kInt:
      op.dtype = DType::kI64;
      op.i = arg->i;
      op.f = static_cast<double>(arg->i);
      return op;
    case Arg::Kind::kBool:
      op.dtype = DType::kBool;
      op.i = arg->b ? 1 : 0;
      op.f = op.i;
      return op;
    default:
      return args.Error(absl::StrCat(name, " must be a tensor or a number"));
  }
}

DType PromoteTypes(DType a, DType b) {
  return Category(a) >= Category(b) ? a : b;
}

DType PromoteOperands(const std::vector<const Operand*>& ops) {
  int category = -1, rank = -1;
  DType result = DType::kInvalid;
  for (const Operand* op : ops) {
    const int c = Category(op->dtype);
    const int r = !op->is_tensor ? 0 : op->meta.rank() == 0 ? 1 : 2;
    if (c > category || (c == category && r > rank)) {
      category = c;
      rank = r;
      result = op->dtype;
    } else if (c == category && r == rank && ElementSize(op->dtype) > ElementSize(result)) {
      result = op->dtype;  // i32 with i64
    }
  }
  return result;
}

absl::StatusOr<std::vector<int64_t>> BroadcastOperands(
    const NodeArgs& args, const std::vector<const Operand*>& ops) {
  std::vector<int64_t> shape;
  for (const Operand* op : ops) {
    std::optional<std::vector<int64_t>> s = BroadcastShapes(shape, op->shape());
    if (!s) {
      std::string shapes;
      for (const Operand* o : ops) {
        absl::StrAppend(&shapes, shapes.empty() ? "" : " and ",
                        ShapeString(o->shape()));
      }
      return args.Error(
          absl::StrCat("shapes ", shapes, " are not broadcastable"));
    }
    shape = *std::move(s);
  }
  if (static_cast<int>(shape.size()) > kMaxRank) {
    return args.Error(absl::StrCat("broadcast rank ", shape.size(),
                                   " exceeds the limit of ", kMaxRank));
  }
  return shape;
}

absl::StatusOr<DType> DTypeArgOr(const NodeArgs& args, int pos, const char* name, DType def,
                                 DTypeMask supported) {
  const Arg* arg = args.Find(pos, name);
  if (arg == nullptr) return def;
  if (arg->kind != Arg::Kind::kDType || !IsValidDType(static_cast<int>(arg->i))) {
    return args.Error(absl::StrCat(name, " must be a dtype"));
  }
  const DType d = static_cast<DType>(arg->i);
  if ((DTypeBit(d) & supported) == 0) {
    return args.Unimplemented(absl::StrCat("dtype ", DTypeName(d), " is not supported here"));
  }
  return d;
}

size_t PlanOperandSources(const std::vector<const Operand*>& ops,
                          DType compute, std::vector<OperandSource>* out) {
  size_t scratch = 0;
  out->clear();
  for (const Operand* op : ops) {
    OperandSource s;
    if (op->is_tensor) {
      s.slot = op->slot;
      s.from = op->dtype;
      s.numel = op->meta.NumElements();
      s.convert = op->dtype != compute;
      if (s.convert) {
        s.scratch_offset = scratch;
        const size_t bytes = static_cast<size_t>(s.numel) * ElementSize(compute);
        scratch += (bytes + 63) / 64 * 64;
      }
    }
    out->push_back(s);
  }
  return scratch;
}

}  // namespace kiln::runtime
