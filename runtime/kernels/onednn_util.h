// The process-wide oneDNN engine and conversions between the runtime's types
// and oneDNN's, for kernels built on oneDNN primitives.
//
// Threading: oneDNN here runs on oneTBB and so inside whatever task arena
// the executor entered; primitives are created with user-managed scratchpads
// so one primitive can run concurrently from several threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/status/status.h"

namespace kiln::runtime {

// The single CPU engine every primitive and memory object uses.
const dnnl::engine& CpuEngine();

// An INTERNAL status for an exception thrown while running `what`.
absl::Status DnnlRunError(const dnnl::error& e, const std::string& what);

inline dnnl::memory::dims ToDnnlDims(const std::vector<int64_t>& shape) {
  return dnnl::memory::dims(shape.begin(), shape.end());
}

// Primitive attributes every Kiln primitive uses: user scratchpad (the
// executor's per-run scratch) so Run() is reentrant.
dnnl::primitive_attr ReentrantAttr();

// Copies `src` (in src_md) to a new memory object in `dst_md` owned by the
// returned memory. For prepacking constant weights at prepare time.
dnnl::memory ReorderToNew(const dnnl::memory::desc& src_md, const void* src,
                          const dnnl::memory::desc& dst_md);

}  // namespace kiln::runtime
