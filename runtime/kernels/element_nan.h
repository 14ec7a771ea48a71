// NaN test for any element type the kernels are instantiated on: integers
// and bool are never NaN. Written as `v != v` so it stays a plain compare
// the loops around it can vectorize.
#pragma once

#include <type_traits>

namespace kiln::runtime {

template <typename T>
inline bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

}  // namespace kiln::runtime
