// Turns compile requests into compiled graphs, reusing earlier work: first
// the graphs compiled in this process (by graph key), then the on-disk
// artifact store (whose entries hold the graph the compiler's passes made,
// so a hit runs no pass), then a fresh compile (whose artifact is stored).
//
// Thread-safe. Two requests for the same key at the same moment compile
// once: the second waits for the first (single flight).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/artifact_store.h"
#include "cache/constant_files.h"
#include "cache/constant_store.h"
#include "cache/redis_store.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/kiln.pb.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/compiled_graph.h"
#include "server/latency_histogram.h"

namespace kiln::server {

struct CompileResult {
  std::shared_ptr<const runtime::CompiledGraph> graph;
  std::string key;
  bool cache_hit = false;
  double compile_ms = 0;
};

// Successful GetOrCompile calls, by where the graph came from. A request
// that is neither kind of hit is a miss, and every miss compiles from
// scratch, so `compiled` is also the miss count.
struct CompileStats {
  std::atomic<uint64_t> compiled{0};     // cache misses: built from scratch
  std::atomic<uint64_t> memory_hits{0};  // already compiled in this process
  std::atomic<uint64_t> disk_hits{0};    // artifact found on disk, no pass run
  std::atomic<uint64_t> remote_hits{0};  // artifact from the fleet's Redis, no pass run
  std::atomic<uint64_t> fleet_waits{0};  // waited for another daemon's compile
  // Time of each successful GetOrCompile, hits included.
  LatencyHistogram seconds{LatencyHistogram::CompileBounds()};
};

class GraphCache {
 public:
  // `files` (may be null): where compiles with model caching save the
  // constants they use and derive, and find those saved before.
  // `remote` (may be null): the fleet's tier behind the artifact store;
  // entries missing here are fetched from it, compiles publish to it, and
  // one daemon of the fleet compiles a key while the others wait for it.
  GraphCache(cache::ConstantStore* constants, cache::ArtifactStore* artifacts,
             cache::ConstantFiles* files = nullptr, cache::RedisStore* remote = nullptr)
      : constants_(constants), artifacts_(artifacts), files_(files), remote_(remote) {}
  // Publishes what is still queued for the fleet first.
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // `options` (CompileRequest.options) must parse as CompileOptions
  // (INVALID_ARGUMENT otherwise); they are part of the key.
  // `shape_variant`: the graph is one shape of a dynamic-shape template;
  // it keeps what it derives from the weights for the next variant
  // (runtime::CompileHints).
  absl::StatusOr<CompileResult> GetOrCompile(const kiln::v1::Graph& graph,
                                             const std::map<std::string, std::string>& options,
                                             bool use_disk_cache, bool shape_variant = false);
  const CompileStats& stats() const { return stats_; }
  // Waits until every compiled entry queued for the fleet is published
  // (tests).
  void FlushPublished();

  struct LiveGraphs {
    uint64_t count = 0;
    uint64_t plan_bytes = 0;  // TotalArenaBytes x pooled arenas (at least 1)
  };
  // The compiled graphs some handle still holds.
  LiveGraphs Live();
  // runtime::TrimIdleArenas on each of them; the bytes freed.
  uint64_t TrimIdleArenas(std::chrono::steady_clock::duration idle);

 private:
  // A compile from scratch. With `optimized`, what the passes made of the
  // graph is described there for the artifact (left empty when it cannot
  // be, or when the compile did not persist what it derived). A saved
  // weight that fails its check makes it compile again deriving every
  // weight from client weights checked up front; `check_first` starts
  // there.
  absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> Build(
      const kiln::v1::Graph& graph, const runtime::CompileOptions& options, bool shape_variant,
      bool persist, kiln::v1::OptimizedGraph* optimized, bool check_first = false);
  // The entry `payload` (from the directory or the fleet) for `graph`
  // compiled without passes; an error when it does not fit or build.
  absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> BuildFromEntry(
      const std::string& key, const std::string& payload, const kiln::v1::Graph& graph,
      const runtime::CompileOptions& options, bool shape_variant);
  // A compile from an artifact's optimized graph: no pass runs.
  absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> BuildOptimized(
      const kiln::v1::OptimizedGraph& optimized, const runtime::CompileOptions& options,
      bool shape_variant);
  // Client constants from the store by hash, each read up to the size in
  // `sizes`; copies from the cache directory that fail their check (all of
  // them checked now with `*check_now`) are dropped. Saved to `persist_to`
  // when given.
  runtime::ConstantResolver Resolver(cache::ConstantFiles* persist_to, const bool* check_now,
                                     const absl::flat_hash_map<std::string, int64_t>* sizes);
  runtime::CompileHints Hints(bool shape_variant);

  class FleetLock;
  // A compiled entry going to the fleet: the derived weights it names
  // first (they are written to the directory in the background, and
  // published as they are), then the entry, while this daemon still holds
  // the key's fleet lock, so the fleet waits for it rather than compiling.
  // In the background: the compile's answer does not wait for Redis.
  struct Publication {
    std::string key;
    std::string payload;
    std::shared_ptr<FleetLock> lock;  // shared: FleetLock is complete only in the .cc
  };
  void Publish(Publication publication);
  void PublishLoop();

  cache::ConstantStore* constants_;
  cache::ArtifactStore* artifacts_;
  cache::ConstantFiles* files_;
  cache::RedisStore* remote_;
  absl::Mutex publish_mu_;
  std::deque<Publication> to_publish_ ABSL_GUARDED_BY(publish_mu_);
  bool publishing_ ABSL_GUARDED_BY(publish_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(publish_mu_) = false;
  std::thread publisher_;  // started with the first publication
  CompileStats stats_;
  absl::Mutex mu_;
  // Live compiled graphs by key; weak so releasing every handle frees them.
  absl::flat_hash_map<std::string, std::weak_ptr<const runtime::CompiledGraph>> live_
      ABSL_GUARDED_BY(mu_);
  // Keys being compiled right now, for single flight.
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
