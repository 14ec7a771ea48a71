// A direct 2-D convolution in double precision, the reference the compiler
// and pass tests check whole compiled graphs against.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kiln::runtime::testing {

// x [C, H, W] convolved with wt [OC, C/groups, k, k] plus b [OC] (square
// kernel, symmetric padding `pad`), then clamped to [0, 6] when `relu6`;
// sets the output's height and width.
inline std::vector<double> ReferenceConv2d(const std::vector<double>& x, int c, int h, int w,
                                           const std::vector<float>& wt,
                                           const std::vector<float>& b, int oc, int k,
                                           int stride, int pad, int groups, bool relu6, int* oh,
                                           int* ow) {
  *oh = (h + 2 * pad - k) / stride + 1;
  *ow = (w + 2 * pad - k) / stride + 1;
  const int icg = c / groups, ocg = oc / groups;
  std::vector<double> out(static_cast<size_t>(oc) * *oh * *ow);
  for (int o = 0; o < oc; ++o)
    for (int y = 0; y < *oh; ++y)
      for (int xx = 0; xx < *ow; ++xx) {
        double acc = b[o];
        for (int i = 0; i < icg; ++i)
          for (int ky = 0; ky < k; ++ky)
            for (int kx = 0; kx < k; ++kx) {
              const int iy = y * stride - pad + ky, ix = xx * stride - pad + kx;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              acc += x[((o / ocg * icg + i) * h + iy) * w + ix] *
                     wt[((o * icg + i) * k + ky) * k + kx];
            }
        out[(o * *oh + y) * *ow + xx] = relu6 ? std::min(6.0, std::max(0.0, acc)) : acc;
      }
  return out;
}

}  // namespace kiln::runtime::testing
