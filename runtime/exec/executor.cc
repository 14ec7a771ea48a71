#include "runtime/exec/executor.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include "absl/strings/str_cat.h"
#include "runtime/exec/profile.h"

namespace kiln::runtime {
namespace {

std::once_flag g_arena_once;
int g_requested_threads = 0;
oneapi::tbb::task_arena* g_arena = nullptr;

oneapi::tbb::task_arena& Arena() {
  std::call_once(g_arena_once, [] {
    int n = g_requested_threads > 0 ? g_requested_threads
                                    : oneapi::tbb::info::default_concurrency();
    g_arena = new oneapi::tbb::task_arena(n);
  });
  return *g_arena;
}

std::unique_ptr<RunArena> TakeArena(const CompiledGraph& g) {
  {
    absl::MutexLock lock(&g.pool_mu);
    if (!g.pool.empty()) {
      auto a = std::move(g.pool.back());
      g.pool.pop_back();
      return a;
    }
  }
  return std::make_unique<RunArena>(g.TotalArenaBytes());
}

void ReturnArena(const CompiledGraph& g, std::unique_ptr<RunArena> a) {
  absl::MutexLock lock(&g.pool_mu);
  g.pool.push_back(std::move(a));
}

}  // namespace

void ConfigureThreads(int num_threads) { g_requested_threads = num_threads; }

int ConfiguredThreads() { return Arena().max_concurrency(); }

absl::Status Execute(const CompiledGraph& g,
                     absl::Span<const void* const> inputs,
                     absl::Span<void* const> outputs) {
  if (inputs.size() != g.input_metas.size() ||
      outputs.size() != g.output_metas.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph takes ", g.input_metas.size(), " inputs and ",
        g.output_metas.size(), " outputs; got ", inputs.size(), " and ",
        outputs.size()));
  }
  std::unique_ptr<RunArena> arena = TakeArena(g);
  if (arena->data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", g.TotalArenaBytes(), " bytes for a run"));
  }
  uint8_t* base = arena->data;
  auto address = [&](const ValueRef& ref) -> void* {
    const ValueSlot& slot = g.slots[ref.node][ref.output];
    switch (slot.kind) {
      case ValueSlot::Kind::kInput:
        return const_cast<void*>(inputs[slot.index]);
      case ValueSlot::Kind::kConstant:
        return const_cast<uint8_t*>(g.constants[slot.index].bytes.get());
      case ValueSlot::Kind::kArena:
        return base + slot.offset;
    }
    return nullptr;
  };

  absl::Status status;
  const bool profile = ProfilingEnabled();
  Arena().execute([&] {
    std::vector<TensorView> in_views, out_views;
    for (const CompiledStep& step : g.steps) {
      const Node& node = g.graph.nodes[step.node];
      in_views.clear();
      out_views.clear();
      for (const ValueRef& ref : step.inputs) {
        in_views.push_back({address(ref), &g.graph.MetaOf(ref)});
      }
      for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
        out_views.push_back({address({step.node, o}), &node.outputs[o]});
      }
      KernelContext ctx{in_views, out_views, base + g.arena_bytes};
      const auto start = profile ? std::chrono::steady_clock::now()
                                 : std::chrono::steady_clock::time_point();
      status = step.kernel->Run(ctx);
      if (profile) {
        RecordStep(node.target, node.name, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now() - start)
                                    .count());
      }
      if (!status.ok()) {
        status = absl::Status(status.code(),
                              absl::StrCat("node '", node.name, "' (", node.target,
                                           "): ", status.message()));
        return;
      }
    }
    for (size_t i = 0; i < g.graph.outputs.size(); ++i) {
      const ValueRef& ref = g.graph.outputs[i];
      std::memcpy(outputs[i], address(ref),
                  static_cast<size_t>(g.output_metas[i].ByteSize()));
    }
  });
  ReturnArena(g, std::move(arena));
  return status;
}

}  // namespace kiln::runtime
