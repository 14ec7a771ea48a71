// Process-wide oneDNN engine and shared helpers (see onednn_util.h).
#include "runtime/kernels/onednn_util.h"

#include "absl/strings/str_cat.h"

namespace kiln::runtime {

const dnnl::engine& CpuEngine() {
  // Leaked on purpose: kernels may outlive static destruction order.
  static const dnnl::engine* engine =
      new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

absl::Status DnnlRunError(const dnnl::error& e, const std::string& what) {
  return absl::InternalError(
      absl::StrCat("oneDNN failed in ", what, ": ", e.what()));
}

dnnl::primitive_attr ReentrantAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory ReorderToNew(const dnnl::memory::desc& src_md, const void* src,
                          const dnnl::memory::desc& dst_md) {
  const dnnl::engine& engine = CpuEngine();
  // oneDNN's memory handle is non-const; the reorder only reads it.
  dnnl::memory src_mem(src_md, engine, const_cast<void*>(src));
  dnnl::memory dst_mem(dst_md, engine);
  dnnl::stream stream(engine);
  dnnl::reorder(src_mem, dst_mem).execute(stream, src_mem, dst_mem);
  stream.wait();
  return dst_mem;
}

}  // namespace kiln::runtime
