// The process-wide oneDNN engine and conversions between the runtime's types
// and oneDNN's, for kernels built on oneDNN primitives.
//
// Threading: oneDNN here runs on oneTBB and so inside whatever task arena
// the executor entered; primitives are created with user-managed scratchpads
// so one primitive can run concurrently from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "runtime/ir/compile_options.h"

namespace kiln::runtime {

// The single CPU engine every primitive and memory object uses.
const dnnl::engine& CpuEngine();

class NodeArgs;

// The one place a oneDNN exception becomes a value: fn()'s result, or
// on_error(e) when oneDNN throws. Exceptions stop here; everything above
// the kernels sees status values.
template <typename Fn, typename OnError>
auto CatchDnnl(Fn&& fn, OnError&& on_error) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    return on_error(e);
  }
}

// INTERNAL "oneDNN failed in <what>: ..." (a primitive that was built
// failed to run: an internal fault, not the user's input).
absl::Status DnnlRunError(const dnnl::error& e, const std::string& what);
// UNIMPLEMENTED "oneDNN cannot build <what>: ..." for the node of `args`
// (the node falls back).
absl::Status DnnlBuildError(const NodeArgs& args, const dnnl::error& e, const std::string& what);

// A kernel's run (fn returns absl::Status) under CatchDnnl.
template <typename Fn>
absl::Status RunDnnl(const char* what, Fn&& fn) {
  return CatchDnnl(std::forward<Fn>(fn),
                   [what](const dnnl::error& e) { return DnnlRunError(e, what); });
}

// Building a node's primitives (fn returns absl::Status) under CatchDnnl.
template <typename Fn>
absl::Status BuildDnnl(const NodeArgs& args, const char* what, Fn&& fn) {
  return CatchDnnl(std::forward<Fn>(fn),
                   [&args, what](const dnnl::error& e) { return DnnlBuildError(args, e, what); });
}

inline dnnl::memory::dims ToDnnlDims(const std::vector<int64_t>& shape) {
  return dnnl::memory::dims(shape.begin(), shape.end());
}

// Primitive attributes every Kiln primitive uses: user scratchpad (the
// executor's per-run scratch) so Run() is reentrant.
dnnl::primitive_attr ReentrantAttr();

// ReentrantAttr() for a compute primitive (convolution, matmul) of a graph
// compiled with `options`. Precision bf16 sets fpmath_mode bf16, which lets
// oneDNN down-convert f32 operands internally where it implements that
// (2023.2: AMX only; on AVX512-BF16 it keeps computing in f32), so kernels
// also give their sources and weights ComputeType() below.
dnnl::primitive_attr AttrFor(const CompileOptions& options);

// The data type a compute primitive's source and weights should have:
// bf16 for precision bf16 on a CPU with native bf16 dot products
// (AVX512-BF16 or AMX), else f32. Destinations and biases stay f32, so
// bf16 never shows at a node's boundary: f32 inputs are converted on the
// way in (constant weights once, at prepare time) and results accumulate
// and come out in f32.
dnnl::memory::data_type ComputeType(const CompileOptions& options);

// Whether oneDNN runs its AVX-512 kernels on this CPU (brgemm-based
// convolutions, computing in NHWC). Without them (AVX2) its convolutions
// are fastest in the 8-channel blocked layout for most shapes.
bool HasAvx512Kernels();

// The size of a piece of a kernel's run scratch, rounded up so the next
// piece starts 64-byte aligned.
inline size_t AlignScratch(size_t n) { return (n + 63) / 64 * 64; }

// A per-run reorder (layout or data-type conversion) with one side, the
// staged one, and its own scratchpad carved out of a kernel's run scratch:
// the destination when a primitive wants its input in another layout, the
// source when it writes its output in another layout.
struct ScratchReorder {
  enum class Staged { kTo, kFrom };

  dnnl::reorder::primitive_desc pd;
  dnnl::reorder prim;
  Staged staged = Staged::kTo;
  size_t buffer_offset = 0;  // the staged tensor, in run scratch
  size_t pad_offset = 0;     // the reorder's scratchpad, in run scratch

  // A reorder from `from` to `to` whose `staged` side lives in scratch at
  // *scratch_bytes; advances *scratch_bytes (64-byte aligned pieces).
  static ScratchReorder Make(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                             size_t* scratch_bytes, Staged staged = Staged::kTo);
  // The staged tensor in `scratch`.
  dnnl::memory Staging(char* scratch) const;
  // Reorders `from` into `to`; one of them is Staging(scratch).
  void Execute(dnnl::stream& stream, const dnnl::memory& from, const dnnl::memory& to,
               char* scratch) const;
  // Reorders `src` (of `from`) into the staged destination; returns it.
  dnnl::memory Run(dnnl::stream& stream, const dnnl::memory& src, char* scratch) const;
};

// A constant weight in the layout (and data type) a primitive prefers.
// `memory` views `bytes`; the kernel keeps `bytes` alive.
struct PackedConstant {
  dnnl::memory memory;
  std::shared_ptr<const void> bytes;
};

// `src` (a constant laid out as src_md) packed into dst_md, at prepare time.
// Packings are shared: while one is alive, packing the constant with the
// same sharing key (NodeArgs::ConstantKey: what the bytes are, not where
// they live) from the same src_md into the same dst_md returns it again,
// so the shape variants of a dynamic graph, which differ in activations,
// not weights, hold one copy of each packed weight. An empty key packs a
// private copy.
PackedConstant PackConstant(const dnnl::memory::desc& src_md, const void* src,
                            const std::string& key, const dnnl::memory::desc& dst_md);
// PackConstant of bytes computed from the constant `origin` (a transform
// of a weight): `derive` returns them and runs only when the packing is
// neither alive nor saved, after origin has passed its checks. A warm
// start that finds the packing then neither reads origin nor derives.
PackedConstant PackDerivedConstant(const dnnl::memory::desc& src_md, const void* origin,
                                   absl::FunctionRef<const void*()> derive,
                                   const std::string& key, const dnnl::memory::desc& dst_md);

// Bytes of packed constants alive in this process (shared ones once).
int64_t PackedConstantBytes();

}  // namespace kiln::runtime
