#include "server/graph_cache.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cache/graph_key.h"
#include "kiln/v1/artifact.pb.h"
#include "runtime/compile/compiler.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/ir/optimized_proto.h"
#include "runtime/util/status_macros.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

namespace {

// A fleet lock's lifetime: renewed while its holder compiles, so that it
// expires soon after a holder that died.
constexpr std::chrono::milliseconds kFleetLockTtl{30'000};
// How often a waiting daemon looks for the holder's entry, and how long it
// waits at most before compiling itself.
constexpr absl::Duration kFleetPoll = absl::Milliseconds(100);
constexpr std::chrono::minutes kFleetWait{30};

}  // namespace

// The fleet's lock on one graph key while this daemon compiles it: taken
// with a TTL, renewed by a thread every third of it, given up when
// destroyed.
class GraphCache::FleetLock {
 public:
  // Null when another daemon holds it.
  static std::unique_ptr<FleetLock> Take(cache::RedisStore* remote, const std::string& key) {
    if (!remote->TryLock(key, kFleetLockTtl)) return nullptr;
    return std::unique_ptr<FleetLock>(new FleetLock(remote, key));
  }
  ~FleetLock() {
    done_.Notify();
    renewer_.join();
    remote_->Unlock(key_);
  }

 private:
  FleetLock(cache::RedisStore* remote, std::string key)
      : remote_(remote), key_(std::move(key)), renewer_([this] {
          while (!done_.WaitForNotificationWithTimeout(absl::FromChrono(kFleetLockTtl / 3))) {
            remote_->Renew(key_, kFleetLockTtl);
          }
        }) {}

  cache::RedisStore* remote_;
  const std::string key_;
  absl::Notification done_;
  std::thread renewer_;
};

namespace {

// Derived constants an artifact may keep inline (those the compiler made
// without a share key, so the cache directory cannot hold them): beyond
// this the artifact keeps no optimized graph.
constexpr int64_t kMaxInlineConstantBytes = int64_t{64} << 20;

}  // namespace

runtime::ConstantResolver GraphCache::Resolver(cache::ConstantFiles* persist_to,
                                               const bool* check_now,
                                               const absl::flat_hash_map<std::string, int64_t>* sizes) {
  return [this, persist_to, check_now, sizes](const std::string& hash) {
    auto known = sizes->find(hash);
    const int64_t size = known == sizes->end() ? -1 : known->second;
    auto data = constants_->Get(hash, size);
    // A copy from the cache directory that failed its check: gone from
    // the store, and from the directory (so: missing, and uploaded again).
    if (data.ok() && files_ != nullptr &&
        (*check_now ? !files_->CheckBeforeRead(data->bytes.get())
                    : files_->IsBad(data->bytes.get()))) {
      constants_->Drop(hash, data->bytes.get());
      data = constants_->Get(hash, size);
    }
    // Saved with the graph's artifact, so a warm start needs no upload.
    if (data.ok() && persist_to != nullptr) persist_to->SaveUploaded(hash, *data);
    return data;
  };
}

runtime::CompileHints GraphCache::Hints(bool shape_variant) {
  runtime::CompileHints hints;
  hints.keep_derived_constants = shape_variant;
  // A weight packed by the compile and read by no run need not wait out
  // the grace period beside its packed copy: during the compile of a large
  // model that doubling is what runs the host out of memory. A client that
  // compiles it again uploads it again (or it is read from the cache
  // directory).
  hints.release_constant = [this](const std::string& hash) { constants_->ReleaseIfUnheld(hash); };
  return hints;
}

absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> GraphCache::Build(
    const kiln::v1::Graph& graph, const runtime::CompileOptions& options, bool shape_variant,
    bool persist, kiln::v1::OptimizedGraph* optimized, bool check_first) {
  cache::ConstantFiles* files = persist ? files_ : nullptr;
  bool check_now = false;  // the second attempt's: every weight checked up front
  // What each constant's node says it holds: a file in the cache directory
  // is read up to that size and no further.
  absl::flat_hash_map<std::string, int64_t> sizes;
  for (const auto& node : graph.nodes()) {
    if (!node.has_constant()) continue;
    if (auto meta = runtime::MetaFromProto(node.constant().meta()); meta.ok()) {
      sizes.emplace(node.constant().hash(), meta->ByteSize());
    }
  }
  runtime::CompileHints hints = Hints(shape_variant);
  bool described = false;
  if (optimized != nullptr) {
    hints.on_optimized = [optimized, &described](const runtime::Graph& g,
                                                 const std::vector<const void*>& data) {
      optimized->Clear();
      described = runtime::OptimizedGraphToProto(g, data, kMaxInlineConstantBytes, optimized);
    };
  }
  absl::StatusOr<std::unique_ptr<runtime::CompiledGraph>> compiled;
  // DATA_LOSS: a constant mapped from the cache directory failed the check
  // made before reading it (it is gone). The second attempt derives every
  // weight again, from client weights checked before use, and reports the
  // bad ones missing (the client uploads them and compiles again).
  for (int attempt = check_first ? 1 : 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      files = nullptr;
      check_now = true;
    }
    runtime::ConstantResolver resolve = Resolver(files, &check_now, &sizes);
    KILN_ASSIGN_OR_RETURN(runtime::Graph ir, runtime::GraphFromProto(graph));
    ir.options = options;
    // In the arena the graph will run in: oneDNN fixes each primitive's
    // work split for the threads it sees when the primitive is created.
    runtime::RunLikeExecution(options, [&] {
      // Set in here: the arena may run this on one of its own threads.
      runtime::PersistenceScope scope(files);
      compiled = runtime::Compile(std::move(ir), resolve, runtime::CompileLimits{}, hints);
    });
    if (compiled.ok() || compiled.status().code() != absl::StatusCode::kDataLoss) break;
    spdlog::warn("compile: {}; compiling again", std::string(compiled.status().message()));
  }
  if (!compiled.ok()) return compiled.status();
  // Derived constants saved only by a compile that persists: without
  // them the description would name bytes no later compile finds.
  if (optimized != nullptr && (!described || files == nullptr)) optimized->Clear();
  return std::shared_ptr<const runtime::CompiledGraph>(*std::move(compiled));
}

absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> GraphCache::BuildFromEntry(
    const std::string& key, const std::string& payload, const kiln::v1::Graph& graph,
    const runtime::CompileOptions& options, bool shape_variant) {
  kiln::v1::Artifact artifact;
  if (!artifact.ParseFromString(payload) ||
      cache::CanonicalGraphBytes(artifact.graph()) != cache::CanonicalGraphBytes(graph)) {
    spdlog::warn("cache entry {} does not match its key; recompiling", key);
    return absl::DataLossError("entry does not match its key");
  }
  if (!artifact.has_optimized()) {
    spdlog::info("cache entry {} holds no optimized graph; recompiling", key.substr(0, 12));
    return absl::NotFoundError("no optimized graph");
  }
  auto built = BuildOptimized(artifact.optimized(), options, shape_variant);
  // Weights the client has yet to upload are no fault of the entry: the
  // compile from scratch reports them.
  if (!built.ok() && built.status().code() != absl::StatusCode::kFailedPrecondition) {
    spdlog::warn("cache entry {}: {}; recompiling", key.substr(0, 12),
                 std::string(built.status().message()));
  } else if (!built.ok()) {
    spdlog::debug("cache entry {}: {}", key.substr(0, 12), std::string(built.status().message()));
  }
  return built;
}

absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> GraphCache::BuildOptimized(
    const kiln::v1::OptimizedGraph& optimized, const runtime::CompileOptions& options,
    bool shape_variant) {
  KILN_ASSIGN_OR_RETURN(runtime::DecodedOptimizedGraph decoded,
                        runtime::OptimizedGraphFromProto(optimized));
  absl::flat_hash_map<std::string, int64_t> sizes;
  for (const runtime::Node& node : decoded.graph.nodes) {
    if (!node.constant_hash.empty()) sizes.emplace(node.constant_hash, node.outputs[0].ByteSize());
  }
  const bool check_now = false;
  runtime::ConstantResolver resolve = Resolver(files_, &check_now, &sizes);
  decoded.graph.options = options;
  absl::StatusOr<std::unique_ptr<runtime::CompiledGraph>> compiled;
  runtime::RunLikeExecution(options, [&] {
    runtime::PersistenceScope scope(files_);
    compiled = runtime::CompileOptimized(std::move(decoded.graph),
                                         std::move(decoded.inline_constants), resolve,
                                         runtime::CompileLimits{}, Hints(shape_variant));
  });
  if (!compiled.ok()) return compiled.status();
  return std::shared_ptr<const runtime::CompiledGraph>(*std::move(compiled));
}

absl::StatusOr<CompileResult> GraphCache::GetOrCompile(
    const kiln::v1::Graph& graph, const std::map<std::string, std::string>& options,
    bool use_disk_cache, bool shape_variant) {
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(runtime::CompileOptions parsed, runtime::ParseCompileOptions(options));
  CompileResult result;
  result.key = cache::GraphKey(graph, options);
  const std::string& key = result.key;
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };

  {
    absl::MutexLock lock(&mu_);
    // Single flight: wait while another request compiles the same key.
    auto not_in_flight = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !in_flight_.contains(key);
    };
    mu_.Await(absl::Condition(&not_in_flight));
    auto it = live_.find(key);
    if (it != live_.end()) {
      if (auto g = it->second.lock()) {
        stats_.memory_hits++;
        stats_.seconds.Observe(std::chrono::steady_clock::now() - start);
        result.graph = std::move(g);
        result.cache_hit = true;
        result.compile_ms = elapsed_ms();
        return result;
      }
    }
    in_flight_[key] = 1;
  }
  auto finish = [this, &key]() {
    absl::MutexLock lock(&mu_);
    in_flight_.erase(key);
  };

  // On disk: a valid artifact for this key holds what the compiler made
  // of this graph with this runtime on this CPU; it is compiled without
  // passes. When that fails (a derived constant gone from the directory,
  // say), the graph is compiled from scratch and the entry written again.
  // Then the fleet's Redis, the same way; an entry from there is written
  // to the directory once it built.
  const bool persist = use_disk_cache && artifacts_->enabled();
  absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> built =
      absl::NotFoundError("no artifact");
  bool disk_hit = false, remote_hit = false;
  // The entry's compile met a saved weight that failed its check: the
  // compile from scratch checks every weight before use, so that the
  // client hears of all the bad ones at once.
  bool damaged = false;
  std::unique_ptr<FleetLock> fleet_lock;
  // An entry that needs client weights the daemon lacks: the client is
  // asked for those (fewer than the graph names, when the compile folded
  // or packed the rest), and its next request hits.
  auto wants_weights = [&graph](const absl::Status& status) {
    std::vector<std::string> missing = runtime::MissingConstantsOf(status);
    if (missing.empty()) return false;
    absl::flat_hash_set<std::string> named;
    for (const auto& node : graph.nodes()) {
      if (node.has_constant()) named.insert(node.constant().hash());
    }
    return std::all_of(missing.begin(), missing.end(),
                       [&named](const std::string& h) { return named.contains(h); });
  };
  if (persist) {
    if (auto payload = artifacts_->Load(key)) {
      built = BuildFromEntry(key, *payload, graph, parsed, shape_variant);
      disk_hit = built.ok();
      damaged = built.status().code() == absl::StatusCode::kDataLoss;
      if (wants_weights(built.status())) {
        finish();
        return built.status();
      }
    }
    if (!disk_hit && remote_ != nullptr) {
      // Fleet-wide single flight: the daemon that takes the lock compiles,
      // the others wait for its entry; a holder that dies stops renewing
      // the lock, which then expires and lets the next one compile.
      const auto give_up = std::chrono::steady_clock::now() + kFleetWait;
      for (bool first = true;; first = false) {
        if (auto payload = remote_->Get("artifact", key)) {
          built = BuildFromEntry(key, *payload, graph, parsed, shape_variant);
          if (built.ok()) {
            remote_hit = true;
            artifacts_->Store(key, *payload);
            break;
          }
          if (wants_weights(built.status())) {
            finish();
            return built.status();
          }
        }
        fleet_lock = FleetLock::Take(remote_, key);
        if (fleet_lock != nullptr) break;
        if (first) {
          stats_.fleet_waits++;
          spdlog::info("graph {}: another daemon of the fleet compiles it; waiting",
                       key.substr(0, 12));
        }
        if (std::chrono::steady_clock::now() > give_up) {
          spdlog::warn("graph {}: gave up waiting for the fleet's compile; compiling here",
                       key.substr(0, 12));
          break;
        }
        absl::SleepFor(kFleetPoll);
      }
    }
  }

  kiln::v1::Artifact artifact;
  if (!disk_hit && !remote_hit) {
    built = Build(graph, parsed, shape_variant, persist,
                  persist ? artifact.mutable_optimized() : nullptr, /*check_first=*/damaged);
  }
  if (!built.ok()) {
    finish();
    return built.status();
  }
  if (disk_hit) {
    stats_.disk_hits++;
  } else if (remote_hit) {
    stats_.remote_hits++;
  } else {
    stats_.compiled++;
    if (persist) {
      *artifact.mutable_graph() = graph;
      for (const auto& meta : (*built)->output_metas) {
        runtime::MetaToProto(meta, artifact.add_outputs());
      }
      artifact.set_arena_bytes((*built)->arena_bytes);
      if (artifact.optimized().nodes_size() == 0) artifact.clear_optimized();
      std::string payload = artifact.SerializeAsString();
      artifacts_->Store(key, payload);
      if (remote_ != nullptr && artifact.has_optimized()) {
        Publish(Publication{key, std::move(payload), std::move(fleet_lock)});
      }
    }
  }
  fleet_lock.reset();
  {
    absl::MutexLock lock(&mu_);
    live_[key] = *built;
    in_flight_.erase(key);
  }
  result.graph = *std::move(built);
  result.cache_hit = disk_hit || remote_hit;
  result.compile_ms = elapsed_ms();
  stats_.seconds.Observe(std::chrono::steady_clock::now() - start);
  spdlog::info("compiled graph {} ({} steps, {} KiB arena, {}) in {:.1f} ms{}", key.substr(0, 12),
               result.graph->steps.size(), result.graph->TotalArenaBytes() / 1024,
               runtime::CompileOptionsString(parsed), result.compile_ms,
               disk_hit ? " [disk cache hit]" : remote_hit ? " [remote cache hit]" : "");
  const auto& ph = result.graph->phases;
  spdlog::debug("graph {} compile phases: constants {:.1f} ms, shapes {:.1f}, passes {:.1f}, "
                "kernels {:.1f}, plan {:.1f}",
                key.substr(0, 12), ph.constants_ms, ph.shapes_ms, ph.passes_ms, ph.kernels_ms,
                ph.plan_ms);
  return result;
}

GraphCache::~GraphCache() {
  {
    absl::MutexLock lock(&publish_mu_);
    stopping_ = true;
  }
  if (publisher_.joinable()) publisher_.join();
}

void GraphCache::Publish(Publication publication) {
  absl::MutexLock lock(&publish_mu_);
  to_publish_.push_back(std::move(publication));
  if (!publisher_.joinable()) publisher_ = std::thread([this] { PublishLoop(); });
}

void GraphCache::PublishLoop() {
  for (;;) {
    Publication next;
    {
      absl::MutexLock lock(&publish_mu_);
      publishing_ = false;
      publish_mu_.Await(absl::Condition(
          +[](GraphCache* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->publish_mu_) {
            return !self->to_publish_.empty() || self->stopping_;
          },
          this));
      if (to_publish_.empty()) return;  // stopping, and everything published
      next = std::move(to_publish_.front());
      to_publish_.pop_front();
      publishing_ = true;
    }
    // The derived weights it names first, so that a daemon that fetches
    // the entry finds them.
    if (files_ != nullptr) files_->Flush();
    remote_->Put("artifact", next.key, next.payload);
    next.lock.reset();  // the fleet may fetch it now
  }
}

void GraphCache::FlushPublished() {
  absl::MutexLock lock(&publish_mu_);
  publish_mu_.Await(absl::Condition(
      +[](GraphCache* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->publish_mu_) {
        return self->to_publish_.empty() && !self->publishing_;
      },
      this));
}

GraphCache::LiveGraphs GraphCache::Live() {
  std::vector<std::shared_ptr<const runtime::CompiledGraph>> graphs;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, weak] : live_) {
      if (auto g = weak.lock()) graphs.push_back(std::move(g));
    }
  }
  LiveGraphs live;
  for (const auto& g : graphs) {
    size_t arenas;
    {
      absl::MutexLock lock(&g->pool_mu);
      arenas = std::max<size_t>(1, g->pool.size());
    }
    live.count++;
    live.plan_bytes += static_cast<uint64_t>(g->TotalArenaBytes()) * arenas;
  }
  return live;
}

uint64_t GraphCache::TrimIdleArenas(std::chrono::steady_clock::duration idle) {
  std::vector<std::shared_ptr<const runtime::CompiledGraph>> graphs;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, weak] : live_) {
      if (auto g = weak.lock()) graphs.push_back(std::move(g));
    }
  }
  uint64_t freed = 0;
  for (const auto& g : graphs) freed += static_cast<uint64_t>(runtime::TrimIdleArenas(*g, idle));
  return freed;
}

}  // namespace kiln::server
