// The layouts an activation tensor between convolutions can have, as the
// integer kiln.conv2d and kiln.conv2d_dw take for their input and output
// (passes/channels_last.cc chooses them). A non-plain value is still an
// ordinary dense tensor, only with another shape, so kernels other than
// the convolutions never see a layout flag:
//
//   kPlain    [N, C, H, W]        the graph's own NCHW order
//   kNhwc     [N, H, W, C]        channels-last (oneDNN's AVX-512 kernels)
//   kBlocked  [N, C/8, H, W, 8]   oneDNN's nChw8c (its AVX2 kernels); only
//                                 for C % 8 == 0
#pragma once

#include <cstdint>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace kiln::runtime {

enum class ActivationLayout : int64_t { kPlain = 0, kNhwc = 1, kBlocked = 2 };

// Channels per block of kBlocked.
inline constexpr int64_t kChannelBlock = 8;

// Whether a logical NCHW shape has a form in `layout`.
inline bool HasLayoutForm(const std::vector<int64_t>& nchw, ActivationLayout layout) {
  if (nchw.size() != 4) return false;
  return layout != ActivationLayout::kBlocked || nchw[1] % kChannelBlock == 0;
}

// The dense shape of logical NCHW `nchw` in `layout` (HasLayoutForm).
inline std::vector<int64_t> LayoutShape(const std::vector<int64_t>& nchw,
                                        ActivationLayout layout) {
  switch (layout) {
    case ActivationLayout::kNhwc:
      return {nchw[0], nchw[2], nchw[3], nchw[1]};
    case ActivationLayout::kBlocked:
      return {nchw[0], nchw[1] / kChannelBlock, nchw[2], nchw[3], kChannelBlock};
    case ActivationLayout::kPlain:
      break;
  }
  return nchw;
}

// Logical [N, C, H, W] of a dense shape in `layout`; empty when the shape
// cannot be one.
inline std::vector<int64_t> LogicalShape(const std::vector<int64_t>& shape,
                                         ActivationLayout layout) {
  switch (layout) {
    case ActivationLayout::kNhwc:
      if (shape.size() != 4) return {};
      return {shape[0], shape[3], shape[1], shape[2]};
    case ActivationLayout::kBlocked:
      if (shape.size() != 5 || shape[4] != kChannelBlock) return {};
      return {shape[0], shape[1] * kChannelBlock, shape[2], shape[3]};
    case ActivationLayout::kPlain:
      break;
  }
  if (shape.size() != 4) return {};
  return shape;
}

inline dnnl::memory::format_tag DnnlTag(ActivationLayout layout) {
  switch (layout) {
    case ActivationLayout::kNhwc:
      return dnnl::memory::format_tag::nhwc;
    case ActivationLayout::kBlocked:
      return dnnl::memory::format_tag::nChw8c;
    case ActivationLayout::kPlain:
      break;
  }
  return dnnl::memory::format_tag::nchw;
}

}  // namespace kiln::runtime
