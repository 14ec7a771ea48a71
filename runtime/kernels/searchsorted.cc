// aten.searchsorted.Tensor / .Scalar and aten.bucketize.Tensor: for each value, the
// index of its insertion point in a sorted row (the first element >= it,
// or > it with right / side="right"). The sequence is 1-D, shared by every
// value, or N-D with one row per leading index of self. A sorter gives the
// order of an unsorted sequence.
//
// The binary search is ATen's, comparison for comparison, so a NaN in the
// sequence or among the values lands where ATen puts it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

struct SearchConfig {
  int64_t rows = 1;     // rows of the sequence
  int64_t n = 0;        // length of each row
  int64_t per_row = 0;  // values searched in each row
  bool right = false;
  bool int32_out = false;
  int seq_slot = 0, value_slot = 1, sorter_slot = -1;
  // The one value when value_slot < 0 (searchsorted.Scalar).
  double scalar = 0;
  int64_t scalar_int = 0;
};

template <typename T>
class SearchSortedKernel final : public Kernel {
 public:
  explicit SearchSortedKernel(SearchConfig c) : c_(c) {}

  size_t ScratchBytes() const override {
    return c_.sorter_slot >= 0 ? c_.rows * c_.n * sizeof(int64_t) : 0;
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const T* seq = ctx.inputs[c_.seq_slot].as<const T>();
    const T* values = c_.value_slot >= 0 ? ctx.inputs[c_.value_slot].as<const T>() : nullptr;
    const int64_t* sorter = nullptr;
    if (c_.sorter_slot >= 0) {
      // The sorter addresses the sequence: copied out of the input once,
      // checked, and used from the copy.
      int64_t* copy = static_cast<int64_t*>(ctx.scratch);
      std::memcpy(copy, ctx.inputs[c_.sorter_slot].data, c_.rows * c_.n * sizeof(int64_t));
      for (int64_t i = 0; i < c_.rows * c_.n; ++i) {
        if (copy[i] < 0 || copy[i] >= c_.n) {
          return absl::InvalidArgumentError(absl::StrCat(
              "searchsorted: sorter index ", copy[i], " is out of range for a row of ", c_.n));
        }
      }
      sorter = copy;
    }
    const int64_t total = c_.rows * c_.per_row;
    ParallelFor(total, 2048, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t row = i / c_.per_row;
        const T* bd = seq + row * c_.n;
        const int64_t* order = sorter ? sorter + row * c_.n : nullptr;
        const T v = values                     ? values[i]
                     : std::is_integral_v<T> ? static_cast<T>(c_.scalar_int)
                                             : static_cast<T>(c_.scalar);
        int64_t lo = 0, hi = c_.n;
        while (lo < hi) {
          const int64_t mid = lo + ((hi - lo) >> 1);
          const T m = order ? bd[order[mid]] : bd[mid];
          const bool go_right = c_.right ? !(m > v) : !(m >= v);
          if (go_right) {
            lo = mid + 1;
          } else {
            hi = mid;
          }
        }
        if (c_.int32_out) {
          ctx.outputs[0].as<int32_t>()[i] = static_cast<int32_t>(lo);
        } else {
          ctx.outputs[0].as<int64_t>()[i] = lo;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  SearchConfig c_;
};

absl::StatusOr<PreparedOp> Search(const NodeArgs& args, const TensorMeta& seq,
                                  const TensorMeta& self, SearchConfig c,
                                  const std::optional<TensorMeta>& sorter) {
  if (seq.dtype != self.dtype) {
    return args.Unimplemented(absl::StrCat("the sequence ", seq.ToString(), " and the values ",
                                           self.ToString(), " differ in dtype"));
  }
  if (seq.rank() == 0) return args.Error("the sorted sequence must have at least one dim");
  c.n = seq.shape.back();
  if (seq.rank() > 1) {
    const std::vector<int64_t> lead(seq.shape.begin(), seq.shape.end() - 1);
    if (self.rank() != seq.rank() ||
        !std::equal(lead.begin(), lead.end(), self.shape.begin())) {
      return args.Error(absl::StrCat("the sequence ", seq.ToString(), " and the values ",
                                     self.ToString(), " must match in all but the last dim"));
    }
    c.rows = Product(lead, 0, static_cast<int>(lead.size()));
  }
  c.per_row = c.rows == 0 ? 0 : self.NumElements() / c.rows;
  if (sorter.has_value()) {
    KILN_RETURN_IF_ERROR(RequireDType(args, *sorter, "sorter", DType::kI64));
    if (sorter->shape != seq.shape) {
      return args.Error(absl::StrCat("sorter ", sorter->ToString(),
                                     " must have the sequence's shape ", seq.ToString()));
    }
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{c.int32_out ? DType::kI32 : DType::kI64, self.shape});
  switch (self.dtype) {
    case DType::kF32:
      op.kernel = std::make_unique<SearchSortedKernel<float>>(c);
      break;
    case DType::kI64:
      op.kernel = std::make_unique<SearchSortedKernel<int64_t>>(c);
      break;
    case DType::kI32:
      op.kernel = std::make_unique<SearchSortedKernel<int32_t>>(c);
      break;
    default:
      return args.Unimplemented(absl::StrCat("cannot search ", self.ToString()));
  }
  return op;
}

// out_int32, right, side and sorter of searchsorted's two forms.
absl::StatusOr<SearchConfig> ReadSearchOptions(const NodeArgs& args,
                                               std::optional<TensorMeta>* sorter) {
  SearchConfig c;
  KILN_ASSIGN_OR_RETURN(c.int32_out, args.Bool(-1, "out_int32", false));
  KILN_ASSIGN_OR_RETURN(c.right, args.Bool(-1, "right", false));
  if (const Arg* side = args.Find(-1, "side")) {
    if (side->kind != Arg::Kind::kString || (side->s != "left" && side->s != "right")) {
      return args.Error("side must be \"left\" or \"right\"");
    }
    if (c.right && side->s == "left") {
      return args.Error("side \"left\" contradicts right=True");
    }
    c.right = side->s == "right";
  }
  KILN_ASSIGN_OR_RETURN(*sorter, args.OptionalTensor(-1, "sorter"));
  c.seq_slot = InputIndex(args, 0, "sorted_sequence");
  if (sorter->has_value()) c.sorter_slot = InputIndex(args, -1, "sorter");
  return c;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareSearchsorted(const NodeArgs& args) {
  // (sorted_sequence, self, *, out_int32=False, right=False, side=None,
  //  sorter=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta seq, args.Tensor(0, "sorted_sequence"));
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(1, "self"));
  std::optional<TensorMeta> sorter;
  KILN_ASSIGN_OR_RETURN(SearchConfig c, ReadSearchOptions(args, &sorter));
  c.value_slot = InputIndex(args, 1, "self");
  return Search(args, seq, self, c, sorter);
}

absl::StatusOr<PreparedOp> PrepareSearchsortedScalar(const NodeArgs& args) {
  // (sorted_sequence, self: Scalar, ...): one value against a 1-D sequence,
  // converted to the sequence's dtype (a float number only to f32).
  KILN_ASSIGN_OR_RETURN(TensorMeta seq, args.Tensor(0, "sorted_sequence"));
  const Arg* value = args.Find(1, "self");
  if (value == nullptr || (value->kind != Arg::Kind::kInt && value->kind != Arg::Kind::kFloat)) {
    return args.Error("self must be a number");
  }
  if (value->kind == Arg::Kind::kFloat && seq.dtype != DType::kF32) {
    return args.Unimplemented("a float value in an integer sequence");
  }
  if (seq.rank() != 1) {
    return args.Error(absl::StrCat("a number is searched in a 1-D sequence, got ", seq.ToString()));
  }
  std::optional<TensorMeta> sorter;
  KILN_ASSIGN_OR_RETURN(SearchConfig c, ReadSearchOptions(args, &sorter));
  c.value_slot = -1;
  c.scalar = value->kind == Arg::Kind::kFloat ? value->f : static_cast<double>(value->i);
  c.scalar_int = value->kind == Arg::Kind::kInt ? value->i : 0;
  return Search(args, seq, TensorMeta{seq.dtype, {}}, c, sorter);
}

absl::StatusOr<PreparedOp> PrepareBucketize(const NodeArgs& args) {
  // (self, boundaries, *, out_int32=False, right=False): boundaries 1-D.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(TensorMeta boundaries, args.Tensor(1, "boundaries"));
  if (boundaries.rank() != 1) {
    return args.Error(absl::StrCat("boundaries ", boundaries.ToString(), " must be 1-D"));
  }
  SearchConfig c;
  KILN_ASSIGN_OR_RETURN(c.int32_out, args.Bool(-1, "out_int32", false));
  KILN_ASSIGN_OR_RETURN(c.right, args.Bool(-1, "right", false));
  c.seq_slot = InputIndex(args, 1, "boundaries");
  c.value_slot = InputIndex(args, 0, "self");
  return Search(args, boundaries, self, c, std::nullopt);
}

}  // namespace kiln::runtime
