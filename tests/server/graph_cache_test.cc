// GraphCache over a real cache directory: a compile stores the graph its
// passes made, and a restarted daemon on the same directory compiles from
// it without running a pass, with the same answer; an entry it cannot use
// (a derived weight gone, a damaged optimized graph) is compiled again from
// scratch and written again.
#include "server/graph_cache.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/artifact_store.h"
#include "cache/constant_files.h"
#include "cache/constant_store.h"
#include "gtest/gtest.h"
#include "kiln/v1/artifact.pb.h"
#include "runtime/exec/executor.h"
#include "runtime/util/sha256.h"
#include "tests/cache/constant_files_fixture.h"
#include "tests/testing/conv_bn_graph.h"

namespace kiln::server {
namespace {

using namespace cache::testing_support;  // NOLINT: the shared fixture

// One daemon's caches over a directory, as KilnService wires them.
struct Daemon {
  explicit Daemon(const fs::path& dir)
      : artifacts(dir.string()), files(&artifacts), graphs(&constants, &artifacts, &files) {
    constants.SetFiles(&files);
    files.InstallDeferredChecks();
  }
  cache::ConstantStore constants;
  cache::ArtifactStore artifacts;
  cache::ConstantFiles files;
  GraphCache graphs;
};

// conv -> batch norm -> relu -> add of a constant row (tests/testing/
// conv_bn_graph.h): the passes fold the batch norm into the convolution,
// fuse the relu, pack the folded weight.
class GraphCacheArtifacts : public ConstantFilesTest {
 protected:
  static constexpr int64_t kIc = 8, kOc = 16, kHw = 10;

  void SetUp() override {
    ConstantFilesTest::SetUp();
    kiln::testing::ConvBnGraph g =
        kiln::testing::BuildConvBnGraph(2, kIc, kOc, kHw, kiln::testing::ConvBnTail::kAddRow);
    weights_ = std::move(g.weights);
    graph_ = std::move(g.graph);
  }

  void Upload(Daemon& d) {
    for (const auto& v : weights_) {
      const int64_t size = static_cast<int64_t>(v.size() * sizeof(float));
      ASSERT_TRUE(d.constants.PutCopy(runtime::Sha256Hex(v.data(), v.size() * 4), v.data(), size)
                      .ok());
    }
  }

  // What one daemon's life did: the answer, and what its graph cache did.
  struct Outcome {
    std::vector<float> y;
    uint64_t compiled = 0, disk_hits = 0;
    std::string key;
    double passes_ms = -1;
    size_t steps = 0;
  };

  // A fresh daemon on the directory compiles the graph and runs it on a
  // fixed input, then goes away with everything it compiled (so nothing
  // derived stays alive in this process for the next one to find).
  Outcome Restart() {
    Outcome o;
    Daemon d(dir_);
    Upload(d);
    auto compiled = d.graphs.GetOrCompile(graph_, {}, /*use_disk_cache=*/true);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    if (!compiled.ok()) return o;
    std::vector<float> x = Random(2 * kIc * kHw * kHw, 99);
    o.y.assign(2 * kOc * kHw * kHw, 0.f);
    const void* in[] = {x.data()};
    void* out[] = {o.y.data()};
    EXPECT_TRUE(runtime::Execute(*compiled->graph, in, out).ok());
    o.key = compiled->key;
    o.passes_ms = compiled->graph->phases.passes_ms;
    o.steps = compiled->graph->steps.size();
    EXPECT_EQ(compiled->cache_hit, d.graphs.stats().disk_hits.load() == 1);
    d.files.Flush();
    o.compiled = d.graphs.stats().compiled.load();
    o.disk_hits = d.graphs.stats().disk_hits.load();
    return o;
  }

  kiln::v1::Artifact ReadArtifact(const std::string& key) {
    cache::ArtifactStore store(dir_.string());
    auto payload = store.Load(key);
    kiln::v1::Artifact artifact;
    EXPECT_TRUE(payload && artifact.ParseFromString(*payload));
    return artifact;
  }

  void WriteArtifact(const std::string& key, const kiln::v1::Artifact& artifact) {
    cache::ArtifactStore store(dir_.string());
    store.Store(key, artifact.SerializeAsString());
  }

  std::vector<std::vector<float>> weights_;
  kiln::v1::Graph graph_;
};

TEST_F(GraphCacheArtifacts, ARestartCompilesFromTheOptimizedGraphWithoutPasses) {
  const Outcome cold = Restart();
  EXPECT_EQ(cold.compiled, 1u);
  EXPECT_EQ(cold.disk_hits, 0u);

  // The entry holds the graph after the passes: the batch norm is gone
  // into the convolution, and derived constants are named by share key.
  const kiln::v1::Artifact artifact = ReadArtifact(cold.key);
  ASSERT_TRUE(artifact.has_optimized());
  int internal = 0, derived = 0;
  for (const auto& node : artifact.optimized().nodes()) {
    if (node.has_call()) {
      EXPECT_NE(node.call().target(), "aten.native_batch_norm.default");
      internal += node.call().target().rfind("kiln.", 0) == 0;
    }
    if (node.has_constant() && node.constant().share_key().rfind("d:", 0) == 0) ++derived;
  }
  EXPECT_GE(internal, 1);  // the fused convolution
  EXPECT_GE(derived, 1);   // its folded weight and bias

  const Outcome warm = Restart();
  EXPECT_EQ(warm.compiled, 0u);
  EXPECT_EQ(warm.disk_hits, 1u);
  EXPECT_EQ(warm.passes_ms, 0.0);
  EXPECT_EQ(warm.steps, cold.steps);
  EXPECT_EQ(warm.y, cold.y);
}

TEST_F(GraphCacheArtifacts, ADerivedWeightGoneMeansACompileFromScratch) {
  const Outcome cold = Restart();
  // Every saved derived constant removed (folds and packed weights): the
  // optimized graph names bytes nobody has.
  for (const std::string& path : Files(dir_)) fs::remove(path);
  const Outcome again = Restart();
  EXPECT_EQ(again.y, cold.y);
  EXPECT_EQ(again.compiled, 1u);
  EXPECT_EQ(again.disk_hits, 0u);
  // Written again: the next restart uses it.
  const Outcome warm = Restart();
  EXPECT_EQ(warm.y, cold.y);
  EXPECT_EQ(warm.compiled, 0u);
  EXPECT_EQ(warm.disk_hits, 1u);
}

TEST_F(GraphCacheArtifacts, DamagedSavedWeightsAreAllReportedMissingAtOnce) {
  const Outcome cold = Restart();
  // A byte of every saved weight's payload changed (uploaded ones and
  // derived ones): headers still look right.
  for (const std::string& path : Files(dir_)) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(cache::kConstantFileHeaderBytes);
    const char c = static_cast<char>(f.get());
    f.seekp(cache::kConstantFileHeaderBytes);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  Daemon d(dir_);  // nothing uploaded: the client weights come from the files
  auto first = d.graphs.GetOrCompile(graph_, {}, /*use_disk_cache=*/true);
  ASSERT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition) << first.status();
  // Every client weight at once, so that one upload and one retry do.
  EXPECT_NE(first.status().message().find(
                absl::StrCat("and ", weights_.size() - 1, " more constants")),
            std::string::npos)
      << first.status();
  // As a client does: upload what the daemon says it lacks (QueryConstants).
  for (const auto& v : weights_) {
    const std::string hash = runtime::Sha256Hex(v.data(), v.size() * 4);
    if (d.constants.Contains(hash)) continue;
    ASSERT_TRUE(
        d.constants.PutCopy(hash, v.data(), static_cast<int64_t>(v.size() * sizeof(float))).ok());
  }
  auto again = d.graphs.GetOrCompile(graph_, {}, /*use_disk_cache=*/true);
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<float> x = Random(2 * kIc * kHw * kHw, 99), y(2 * kOc * kHw * kHw, 0.f);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(runtime::Execute(*again->graph, in, out).ok());
  EXPECT_EQ(y, cold.y);
}

TEST_F(GraphCacheArtifacts, ADamagedOptimizedGraphIsCompiledAgainNotTrusted) {
  const Outcome cold = Restart();
  const kiln::v1::Artifact good = ReadArtifact(cold.key);

  // Each damage, stored under the right key with a valid checksum (as a
  // bug or a writer of the directory could): refused, compiled from
  // scratch, answered right.
  std::vector<std::function<void(kiln::v1::OptimizedGraph*)>> damages = {
      // A reference to a later node.
      [](kiln::v1::OptimizedGraph* g) {
        for (auto& node : *g->mutable_nodes()) {
          if (node.has_call() && node.call().args_size() > 0 &&
              node.call().args(0).has_node()) {
            node.mutable_call()->mutable_args(0)->mutable_node()->set_node(g->nodes_size() - 1 +
                                                                            5);
            return;
          }
        }
      },
      // An op no registry knows.
      [](kiln::v1::OptimizedGraph* g) {
        for (auto& node : *g->mutable_nodes()) {
          if (node.has_call()) node.mutable_call()->set_target("kiln.no_such_op");
        }
      },
      // A share key that is no key.
      [](kiln::v1::OptimizedGraph* g) {
        for (auto& node : *g->mutable_nodes()) {
          if (node.has_constant()) node.mutable_constant()->set_share_key("d:zz");
        }
      },
      // A derived key nobody saved.
      [](kiln::v1::OptimizedGraph* g) {
        for (auto& node : *g->mutable_nodes()) {
          if (node.has_constant() && node.constant().share_key().rfind("d:", 0) == 0) {
            node.mutable_constant()->set_share_key("d:" + std::string(64, 'e'));
          }
        }
      },
      // A constant whose meta disagrees with its bytes.
      [](kiln::v1::OptimizedGraph* g) {
        for (auto& node : *g->mutable_nodes()) {
          if (node.has_constant()) node.mutable_constant()->mutable_meta()->add_shape(3);
        }
      },
      // Constants before inputs.
      [](kiln::v1::OptimizedGraph* g) {
        if (g->nodes_size() > 1) g->mutable_nodes()->SwapElements(0, g->nodes_size() - 1);
      },
      // No outputs.
      [](kiln::v1::OptimizedGraph* g) { g->clear_outputs(); },
  };
  for (size_t i = 0; i < damages.size(); ++i) {
    SCOPED_TRACE(i);
    kiln::v1::Artifact bad = good;
    damages[i](bad.mutable_optimized());
    WriteArtifact(cold.key, bad);
    const Outcome again = Restart();
    EXPECT_EQ(again.y, cold.y);
    EXPECT_EQ(again.compiled, 1u);
    EXPECT_EQ(again.disk_hits, 0u);
  }
}

}  // namespace
}  // namespace kiln::server
