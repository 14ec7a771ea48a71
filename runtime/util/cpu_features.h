// The CPU features that decide which kernels a compiled artifact may use;
// part of every cache key so an artifact never runs on a CPU it was not
// built for.
#pragma once

#include <string>
#include <vector>

namespace kiln::runtime {

// Sorted feature names, e.g. {"avx2", "avx512_bf16", "avx512f", ...}.
const std::vector<std::string>& CpuFeatures();
// The same, joined with ','.
const std::string& CpuFeatureString();

}  // namespace kiln::runtime
