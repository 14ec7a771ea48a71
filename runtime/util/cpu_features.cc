#include "runtime/util/cpu_features.h"

#include "absl/strings/str_join.h"

namespace kiln::runtime {

const std::vector<std::string>& CpuFeatures() {
  static const auto* features = [] {
    auto* f = new std::vector<std::string>();
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) f->push_back("avx2");
    if (__builtin_cpu_supports("avx512bf16")) f->push_back("avx512_bf16");
    if (__builtin_cpu_supports("avx512bw")) f->push_back("avx512bw");
    if (__builtin_cpu_supports("avx512f")) f->push_back("avx512f");
    if (__builtin_cpu_supports("avx512vnni")) f->push_back("avx512_vnni");
    if (__builtin_cpu_supports("fma")) f->push_back("fma");
    return f;
  }();
  return *features;
}

const std::string& CpuFeatureString() {
  static const auto* s = new std::string(absl::StrJoin(CpuFeatures(), ","));
  return *s;
}

}  // namespace kiln::runtime
