#include "runtime/kernels/pool_geometry.h"

#include <algorithm>
#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

// Grain in planes so each task does at least ~16K output elements.
int64_t PlaneGrain(const PoolGeometry& g) {
  return std::max<int64_t>(
      1, (int64_t{1} << 14) / std::max<int64_t>(1, g.oh * g.ow));
}

namespace {

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace

int64_t PoolOutputSize(int64_t in, int64_t k, int64_t pad, int64_t stride,
                       int64_t dilation, bool ceil_mode) {
  int64_t out = FloorDiv(in + 2 * pad - dilation * (k - 1) - 1 +
                             (ceil_mode ? stride - 1 : 0),
                         stride) +
                1;
  // The last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

absl::Status ReadWindow(const NodeArgs& args, bool has_dilation,
                        bool ceil_mode, PoolGeometry* g) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> k_list,
                        args.IntList(1, "kernel_size"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> s_list,
                        args.IntList(2, "stride", {}));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> p_list,
                        args.IntList(3, "padding", {0}));
  std::vector<int64_t> d_list = {1};
  if (has_dilation) {
    KILN_ASSIGN_OR_RETURN(d_list, args.IntList(4, "dilation", {1}));
  }
  KILN_ASSIGN_OR_RETURN(auto k, ExpandPair(args, k_list, "kernel_size"));
  // An empty stride means stride = kernel_size.
  std::array<int64_t, 2> s = k;
  if (!s_list.empty()) {
    KILN_ASSIGN_OR_RETURN(s, ExpandPair(args, s_list, "stride"));
  }
  KILN_ASSIGN_OR_RETURN(auto p, ExpandPair(args, p_list, "padding"));
  KILN_ASSIGN_OR_RETURN(auto d, ExpandPair(args, d_list, "dilation"));
  for (int i = 0; i < 2; ++i) {
    if (k[i] <= 0) {
      return args.Error(absl::StrCat("kernel_size must be positive, got ",
                                     ShapeString(k_list)));
    }
    if (s[i] <= 0) {
      return args.Error(absl::StrCat("stride must be positive, got ",
                                     ShapeString(s_list)));
    }
    if (d[i] <= 0) {
      return args.Error(absl::StrCat("dilation must be positive, got ",
                                     ShapeString(d_list)));
    }
    if (p[i] < 0 || p[i] > k[i] / 2) {
      return args.Error(absl::StrCat(
          "padding must be between 0 and half the kernel size, got padding ",
          ShapeString(p_list), " for kernel_size ", ShapeString(k_list)));
    }
  }
  g->kh = k[0];
  g->kw = k[1];
  g->sh = s[0];
  g->sw = s[1];
  g->ph = p[0];
  g->pw = p[1];
  g->dh = d[0];
  g->dw = d[1];
  g->oh = PoolOutputSize(g->ih, g->kh, g->ph, g->sh, g->dh, ceil_mode);
  g->ow = PoolOutputSize(g->iw, g->kw, g->pw, g->sw, g->dw, ceil_mode);
  if (g->oh < 1 || g->ow < 1) {
    return args.Error(absl::StrCat("input size ", g->ih, "x", g->iw,
                                   " gives output size ", g->oh, "x", g->ow,
                                   ", which is too small"));
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
