// Client constants for tests that compile graphs: a table of float vectors
// keyed by their SHA-256, as the daemon's constant store keys uploads, and
// the resolver Compile() takes. The table must outlive compiled graphs
// that read it (the resolver lends its bytes, no copy).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/compile/compiler.h"
#include "runtime/util/sha256.h"

namespace kiln::testing {

// n floats uniform in [lo, hi), the same for the same seed.
inline std::vector<float> UniformFloats(size_t n, float lo, float hi, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

class ConstantTable {
 public:
  void Add(const std::vector<float>& v) { data_[runtime::Sha256Hex(v.data(), v.size() * 4)] = v; }

  runtime::ConstantResolver Resolver() {
    return [this](const std::string& h) -> absl::StatusOr<runtime::ConstantData> {
      auto it = data_.find(h);
      if (it == data_.end()) return absl::NotFoundError(h);
      return runtime::ConstantData{
          std::shared_ptr<const uint8_t>(reinterpret_cast<const uint8_t*>(it->second.data()),
                                         [](const uint8_t*) {}),
          static_cast<int64_t>(it->second.size() * 4)};
    };
  }

 private:
  std::map<std::string, std::vector<float>> data_;
};

}  // namespace kiln::testing
