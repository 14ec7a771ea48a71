// q k^T per attention head in double precision, q and k as a transformer's
// projections leave them ([len, heads * dim], heads side by side in each
// row): the reference for tests of products that read the heads where
// they lie.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::runtime::testing {

// out[(h * len + i) * len + j] = sum over e of q[i, h, e] * k[j, h, e].
inline std::vector<double> ReferenceHeadScores(const std::vector<float>& q,
                                               const std::vector<float>& k, int64_t heads,
                                               int64_t len, int64_t dim) {
  std::vector<double> out(heads * len * len);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < len; ++i)
      for (int64_t j = 0; j < len; ++j) {
        double sum = 0;
        for (int64_t e = 0; e < dim; ++e) {
          sum += double{q[i * heads * dim + h * dim + e]} * k[j * heads * dim + h * dim + e];
        }
        out[(h * len + i) * len + j] = sum;
      }
  return out;
}

}  // namespace kiln::runtime::testing
