// Deterministic random data for tests at every layer, from the micro-kernels
// (which see only pointers) up: one definition, so each test binary can use
// it without linking the layers above its own.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kiln::runtime::testing {

// Uniform values in [lo, hi), deterministic per seed.
inline std::vector<float> RandomFloats(int64_t n, uint32_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace kiln::runtime::testing
