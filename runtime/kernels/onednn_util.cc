// Process-wide oneDNN engine and shared helpers (see onednn_util.h).
#include "runtime/kernels/onednn_util.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/ops/op_def.h"
#include "runtime/util/large_alloc.h"

namespace kiln::runtime {
namespace {

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

absl::Status DnnlBuildError(const NodeArgs& args, const dnnl::error& e, const std::string& what) {
  return args.Unimplemented(absl::StrCat("oneDNN cannot build ", what, ": ", e.what()));
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
                                    const dnnl::memory::desc& to, size_t* scratch_bytes,
                                    Staged staged) {
  ScratchReorder r;
  r.pd = dnnl::reorder::primitive_desc(CpuEngine(), from, CpuEngine(), to, ReentrantAttr());
  r.prim = dnnl::reorder(r.pd);
  r.staged = staged;
  *scratch_bytes = AlignScratch(*scratch_bytes);
  r.buffer_offset = *scratch_bytes;
  *scratch_bytes += AlignScratch((staged == Staged::kTo ? to : from).get_size());
  r.pad_offset = *scratch_bytes;
  *scratch_bytes += AlignScratch(r.pd.scratchpad_desc().get_size());
  return r;
}

dnnl::memory ScratchReorder::Staging(char* scratch) const {
  return dnnl::memory(staged == Staged::kTo ? pd.dst_desc() : pd.src_desc(), CpuEngine(),
                      scratch + buffer_offset);
}

void ScratchReorder::Execute(dnnl::stream& stream, const dnnl::memory& from,
                             const dnnl::memory& to, char* scratch) const {
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  if (pd.scratchpad_desc().get_size() > 0) {
    args[DNNL_ARG_SCRATCHPAD] =
        dnnl::memory(pd.scratchpad_desc(), CpuEngine(), scratch + pad_offset);
  }
  prim.execute(stream, args);
}

dnnl::memory ScratchReorder::Run(dnnl::stream& stream, const dnnl::memory& src,
                                 char* scratch) const {
  dnnl::memory dst = Staging(scratch);
  Execute(stream, src, dst, scratch);
  return dst;
}

namespace {

struct Packing {
  dnnl::memory::desc src_md, dst_md;
  std::weak_ptr<const void> bytes;
};

struct PackCache {
  absl::Mutex mu;
  // By sharing key; few packings per key (one per format).
  absl::flat_hash_map<std::string, std::vector<Packing>> by_key ABSL_GUARDED_BY(mu);
  size_t sweep_at ABSL_GUARDED_BY(mu) = 64;
};

PackCache& Packings() {
  static auto* cache = new PackCache;
  return *cache;
}

std::atomic<int64_t> packed_bytes{0};

// Drops packings no kernel holds any more; called as the map grows so it
// stays proportional to the live ones.
void SweepExpired(PackCache& cache) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache.mu) {
  for (auto it = cache.by_key.begin(); it != cache.by_key.end();) {
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const Packing& p) { return p.bytes.expired(); }),
               list.end());
    if (list.empty()) {
      cache.by_key.erase(it++);
    } else {
      ++it;
    }
  }
  cache.sweep_at = std::max<size_t>(64, 2 * cache.by_key.size());
}

PackedConstant View(const dnnl::memory::desc& dst_md, std::shared_ptr<const void> bytes) {
  // oneDNN's memory handle is non-const; kernels only read weights.
  dnnl::memory m(dst_md, CpuEngine(), const_cast<void*>(bytes.get()));
  return PackedConstant{std::move(m), std::move(bytes)};
}

// A memory layout as text, for naming a packed weight outside this
// process; empty for layouts it cannot describe (opaque formats).
std::string LayoutString(const dnnl::memory::desc& md) {
  if (md.get_format_kind() != dnnl::memory::format_kind::blocked) return "";
  auto dims = [](const dnnl::memory::dims& d) { return absl::StrJoin(d, ","); };
  return absl::StrCat("dt", static_cast<int>(md.get_data_type()), " d", dims(md.get_dims()),
                      " p", dims(md.get_padded_dims()), " o", dims(md.get_padded_offsets()),
                      " s", dims(md.get_strides()), " b", dims(md.get_inner_blks()), " i",
                      dims(md.get_inner_idxs()), " z", md.get_size());
}

// The persistence key of `key`'s bytes packed from src_md into dst_md.
std::string PersistKey(const std::string& key, const dnnl::memory::desc& src_md,
                       const dnnl::memory::desc& dst_md) {
  const std::string src = LayoutString(src_md), dst = LayoutString(dst_md);
  if (key.empty() || src.empty() || dst.empty()) return "";
  return absl::StrCat("pack|", key, "|", src, "|", dst);
}

}  // namespace

PackedConstant PackConstant(const dnnl::memory::desc& src_md, const void* src,
                            const std::string& key, const dnnl::memory::desc& dst_md) {
  return PackDerivedConstant(src_md, src, [src] { return src; }, key, dst_md);
}

PackedConstant PackDerivedConstant(const dnnl::memory::desc& src_md, const void* origin,
                                   absl::FunctionRef<const void*()> derive,
                                   const std::string& key, const dnnl::memory::desc& dst_md) {
  PackCache& cache = Packings();
  auto find = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache.mu) -> std::shared_ptr<const void> {
    auto it = cache.by_key.find(key);
    if (it == cache.by_key.end()) return nullptr;
    for (const Packing& p : it->second) {
      if (p.src_md == src_md && p.dst_md == dst_md) {
        if (auto live = p.bytes.lock()) return live;
      }
    }
    return nullptr;
  };
  CompileReads* reads = CurrentCompileReads();
  auto not_read = [&] {
    if (reads != nullptr) reads->packed_without_reading.push_back(origin);
  };
  if (!key.empty()) {
    absl::MutexLock lock(&cache.mu);
    if (auto live = find()) {
      not_read();
      return View(dst_md, std::move(live));
    }
  }
  const size_t size = std::max<size_t>(dst_md.get_size(), 1);
  const int64_t counted = static_cast<int64_t>(size);
  auto publish = [&](std::shared_ptr<const void> bytes) {
    absl::MutexLock lock(&cache.mu);
    if (auto live = find()) return View(dst_md, std::move(live));
    cache.by_key[key].push_back(Packing{src_md, dst_md, bytes});
    if (cache.by_key.size() >= cache.sweep_at) SweepExpired(cache);
    return View(dst_md, std::move(bytes));
  };
  // Saved by an earlier daemon (a warm start): mapped, not packed again.
  ConstantPersistence* persistence = CurrentPersistence();
  const std::string persist_key =
      persistence == nullptr ? "" : PersistKey(key, src_md, dst_md);
  if (!persist_key.empty()) {
    // Checked now: kernels read it at every run.
    if (std::optional<ConstantData> saved =
            persistence->Load(persist_key, counted, /*defer_check=*/false)) {
      not_read();
      packed_bytes += counted;
      const void* raw = saved->bytes.get();
      std::shared_ptr<const void> bytes(raw, [counted, keep = std::move(saved->bytes)](const void*) {
        packed_bytes -= counted;
      });
      return publish(std::move(bytes));
    }
  }
  // Packed outside the lock: a large reorder must not hold up other
  // compiles. Two compiles racing on one weight may both pack; the first
  // to publish wins and the other's copy is dropped.
  const bool src_ok = CheckBeforeRead(origin);
  if (!src_ok && reads != nullptr) reads->failed_check = true;
  const void* src = derive();
  const size_t alloc = (size + 63) / 64 * 64;
  void* raw = AllocateLarge(alloc);
  if (raw == nullptr) throw std::bad_alloc();
  std::shared_ptr<const void> bytes(raw, [counted, alloc](const void* p) {
    packed_bytes -= counted;
    FreeLarge(const_cast<void*>(p), alloc);
  });
  packed_bytes += counted;
  {
    const dnnl::engine& engine = CpuEngine();
    dnnl::memory src_mem(src_md, engine, const_cast<void*>(src));
    dnnl::memory dst_mem(dst_md, engine, const_cast<void*>(bytes.get()));
    dnnl::stream stream(engine);
    dnnl::reorder(src_mem, dst_mem).execute(stream, src_mem, dst_mem);
    stream.wait();
  }
  // Packed from bad bytes: kept private (the compile fails, CompileReads).
  if (key.empty() || !src_ok) return View(dst_md, std::move(bytes));
  if (!persist_key.empty()) {
    persistence->Save(persist_key,
                      ConstantData{std::static_pointer_cast<const uint8_t>(bytes), counted});
  }
  return publish(std::move(bytes));
}

int64_t PackedConstantBytes() { return packed_bytes.load(); }

}  // namespace kiln::runtime
