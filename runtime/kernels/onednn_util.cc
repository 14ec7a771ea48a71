// Process-wide oneDNN engine and shared helpers (see onednn_util.h).
#include "runtime/kernels/onednn_util.h"

#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {
namespace {

constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

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

dnnl::primitive_attr AttrFor(const CompileOptions& options) {
  dnnl::primitive_attr attr = ReentrantAttr();
  if (options.precision == Precision::kBf16) attr.set_fpmath_mode(dnnl::fpmath_mode::bf16);
  return attr;
}

dnnl::memory::data_type ComputeType(const CompileOptions& options) {
  if (options.precision != Precision::kBf16) return dnnl::memory::data_type::f32;
  // Without native bf16 dot products oneDNN would emulate them (or have no
  // kernel at all), slower than f32: keep f32 there.
  static const bool native_bf16 = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_fp16 ||
           isa == dnnl::cpu_isa::avx512_core_amx || isa == dnnl::cpu_isa::avx512_core_amx_fp16;
  }();
  return native_bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

bool HasAvx512Kernels() {
  static const bool avx512 = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case dnnl::cpu_isa::avx512_core:
      case dnnl::cpu_isa::avx512_core_vnni:
      case dnnl::cpu_isa::avx512_core_bf16:
      case dnnl::cpu_isa::avx512_core_fp16:
      case dnnl::cpu_isa::avx512_core_amx:
      case dnnl::cpu_isa::avx512_core_amx_fp16:
        return true;
      default:
        return false;
    }
  }();
  return avx512;
}

ScratchReorder ScratchReorder::Make(const dnnl::memory::desc& from,
                                    const dnnl::memory::desc& to, size_t* scratch_bytes) {
  ScratchReorder r;
  r.pd = dnnl::reorder::primitive_desc(CpuEngine(), from, CpuEngine(), to, ReentrantAttr());
  r.prim = dnnl::reorder(r.pd);
  *scratch_bytes = AlignUp(*scratch_bytes);
  r.buffer_offset = *scratch_bytes;
  *scratch_bytes += AlignUp(to.get_size());
  r.pad_offset = *scratch_bytes;
  *scratch_bytes += AlignUp(r.pd.scratchpad_desc().get_size());
  return r;
}

dnnl::memory ScratchReorder::Run(dnnl::stream& stream, const dnnl::memory& src,
                                 char* scratch) const {
  dnnl::memory dst(pd.dst_desc(), CpuEngine(), scratch + buffer_offset);
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  if (pd.scratchpad_desc().get_size() > 0) {
    args[DNNL_ARG_SCRATCHPAD] =
        dnnl::memory(pd.scratchpad_desc(), CpuEngine(), scratch + pad_offset);
  }
  prim.execute(stream, args);
  return dst;
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
