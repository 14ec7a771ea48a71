// A compile with persistence (cache/constant_files.h behind
// runtime::ConstantPersistence) reads the batch-norm-folded and packed
// weights an earlier compile saved instead of deriving them, with the same
// result; deferred checks read only what the compile uses.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <vector>

#include "cache/constant_files.h"
#include "cache/constant_store.h"
#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/util/sha256.h"
#include "tests/cache/constant_files_fixture.h"
#include "tests/testing/conv_bn_graph.h"

namespace kiln::cache {
namespace {

using namespace testing_support;  // NOLINT: the shared fixture

// tests/testing/conv_bn_graph.h: compiling folds the batch norm into the
// convolution's weight and bias and packs the folded weight.
class PersistedCompile : public ConstantFilesTest {
 protected:
  int64_t kIc = 8, kOc = 16, kHw = 10;  // set before SetUp builds the graph

  kiln::v1::Graph Build() {
    kiln::testing::ConvBnGraph g =
        kiln::testing::BuildConvBnGraph(2, kIc, kOc, kHw, kiln::testing::ConvBnTail::kNone);
    weights_ = std::move(g.weights);
    return std::move(g.graph);
  }

  runtime::ConstantResolver Resolver() {
    return [this](const std::string& h) -> absl::StatusOr<runtime::ConstantData> {
      for (const auto& v : weights_) {
        if (runtime::Sha256Hex(v.data(), v.size() * 4) == h) return Borrow(v);
      }
      return absl::NotFoundError(h);
    };
  }

  // Compiles the graph with `persistence` and runs it on a fixed input.
  std::vector<float> CompileAndRun(runtime::ConstantPersistence* persistence) {
    auto ir = runtime::GraphFromProto(graph_);
    EXPECT_TRUE(ir.ok()) << ir.status();
    absl::StatusOr<std::unique_ptr<runtime::CompiledGraph>> cg;
    {
      runtime::PersistenceScope scope(persistence);
      cg = runtime::Compile(*std::move(ir), Resolver());
    }
    EXPECT_TRUE(cg.ok()) << cg.status();
    if (!cg.ok()) return {};
    std::vector<float> x = Random(2 * kIc * kHw * kHw, 99), y(2 * kOc * kHw * kHw, 0.f);
    const void* in[] = {x.data()};
    void* out[] = {y.data()};
    EXPECT_TRUE(runtime::Execute(**cg, in, out).ok());
    return y;  // the compiled graph goes: nothing derived stays alive in memory
  }

  // A first daemon's compile: what it derives is saved in the directory.
  void SaveDerived() {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    CompileAndRun(&files);
    files.Flush();
  }

  // Keys of the constants saved in the directory, as their headers say
  // (ConstantFiles::List).
  std::vector<std::string> SavedKeys() {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    std::vector<std::string> keys;
    for (const ConstantFiles::Saved& saved : files.List()) keys.push_back(saved.key);
    return keys;
  }

  void SetUp() override {
    ConstantFilesTest::SetUp();
    graph_ = Build();
  }

  std::vector<std::vector<float>> weights_;
  kiln::v1::Graph graph_;
};

TEST_F(PersistedCompile, ARestartReadsFoldedAndPackedWeightsAndAnswersTheSame) {
  const std::vector<float> plain = CompileAndRun(nullptr);
  std::vector<float> first, warm;
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    Counting counting(&files);
    first = CompileAndRun(&counting);
    files.Flush();
    EXPECT_EQ(counting.hits, 0);
    EXPECT_GE(counting.saves, 3);  // folded weight, folded bias, packed weight
  }
  EXPECT_EQ(first, plain);
  EXPECT_GE(Files(dir_).size(), 3u);
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    Counting counting(&files);
    warm = CompileAndRun(&counting);
    EXPECT_GE(counting.hits, 2);  // the folds (both found, not recomputed), the packing
    EXPECT_EQ(counting.misses, 0);
  }
  EXPECT_EQ(warm, plain);

  // Every file damaged: each is dropped, everything derived again, and the
  // answer is still the same.
  for (const std::string& path : Files(dir_)) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kConstantFileHeaderBytes);
    f.put('\x7f');
  }
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    Counting counting(&files);
    EXPECT_EQ(CompileAndRun(&counting), plain);
    EXPECT_EQ(counting.hits, 0);
    EXPECT_GE(counting.misses, 2);
  }
}

// The saved files by what their header says they hold: "d:" keys are
// folds, "pack|" keys packed weights.
std::vector<std::string> FilesOfKind(const fs::path& dir, const std::string& key_prefix) {
  std::vector<std::string> out;
  for (const std::string& path : Files(dir)) {
    std::ifstream f(path, std::ios::binary);
    std::string key(64, '\0');
    f.seekg(32);
    f.read(key.data(), static_cast<std::streamsize>(key.size()));
    if (key.compare(0, key_prefix.size(), key_prefix) == 0) out.push_back(path);
  }
  return out;
}

void Damage(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(kConstantFileHeaderBytes);
  const char c = static_cast<char>(f.get());
  f.seekp(kConstantFileHeaderBytes);
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST_F(PersistedCompile, DeferredChecksReadOnlyWhatTheCompileUses) {
  const std::vector<float> plain = CompileAndRun(nullptr);
  SaveDerived();
  std::vector<std::string> folds = FilesOfKind(dir_, "d:");
  const std::vector<std::string> packs = FilesOfKind(dir_, "pack|");
  ASSERT_EQ(folds.size(), 2u);  // weight and bias
  ASSERT_GE(packs.size(), 1u);
  if (fs::file_size(folds[0]) < fs::file_size(folds[1])) std::swap(folds[0], folds[1]);
  const std::string& folded_weight = folds[0];

  // The folded weight feeds only its packing, which is found: it is loaded
  // but never used, so never checked, and a damaged copy does no harm.
  // (The folded bias is read by runs: it is checked.)
  Damage(folded_weight);
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    files.InstallDeferredChecks();
    EXPECT_EQ(CompileAndRun(&files), plain);
    EXPECT_GT(files.loaded_bytes(), files.checked_bytes());
    EXPECT_TRUE(fs::exists(folded_weight));
  }

  // The packing damaged too: it is checked on load (runs read it), found
  // bad, and packing again must read the folded weight, whose check fails:
  // the compile fails with DATA_LOSS, and the next one derives everything
  // again from the client's weights.
  for (const std::string& p : packs) Damage(p);
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  files.InstallDeferredChecks();
  auto ir = runtime::GraphFromProto(graph_);
  ASSERT_TRUE(ir.ok());
  absl::StatusOr<std::unique_ptr<runtime::CompiledGraph>> failed;
  {
    runtime::PersistenceScope scope(&files);
    failed = runtime::Compile(*std::move(ir), Resolver());
  }
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss) << failed.status();
  failed = absl::UnknownError("dropped");  // lets the bad copies go
  EXPECT_FALSE(fs::exists(folded_weight));
  EXPECT_EQ(CompileAndRun(&files), plain);
}

// Wide enough that the folded weight (64x64x3x3 floats) is past what a
// deferred load reads in at once: it is read in when first needed, by the
// packing or the Winograd transform that asks for it, or never.
class PersistedWideCompile : public PersistedCompile {
 protected:
  void SetUp() override {
    kIc = 64;
    kOc = 64;
    PersistedCompile::SetUp();
  }
};

TEST_F(PersistedWideCompile, WeightsReadInWhenFirstNeededGiveTheSameAnswer) {
  const std::vector<float> plain = CompileAndRun(nullptr);
  SaveDerived();
  for (int round = 0; round < 2; ++round) {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    files.InstallDeferredChecks();
    EXPECT_EQ(CompileAndRun(&files), plain) << round;
    EXPECT_GT(files.loaded_bytes(), 0u);
    EXPECT_GE(files.loaded_bytes(), files.checked_bytes());
  }
  // The folds damaged: whatever reads them gets them checked first.
  for (const std::string& path : FilesOfKind(dir_, "d:")) Damage(path);
  for (const std::string& path : FilesOfKind(dir_, "pack|")) Damage(path);
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  files.InstallDeferredChecks();
  auto ir = runtime::GraphFromProto(graph_);
  ASSERT_TRUE(ir.ok());
  absl::StatusOr<std::unique_ptr<runtime::CompiledGraph>> compiled;
  {
    runtime::PersistenceScope scope(&files);
    compiled = runtime::Compile(*std::move(ir), Resolver());
  }
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kDataLoss) << compiled.status();
  compiled = absl::UnknownError("dropped");
  EXPECT_EQ(CompileAndRun(&files), plain);
}

// Wide and large enough for the Winograd convolution (kernels/
// conv_winograd.h), which packs a transform of the folded weight: a warm
// start that finds the packing neither reads the fold nor transforms it.
class PersistedWinogradCompile : public PersistedCompile {
 protected:
  void SetUp() override {
    kIc = 64;
    kOc = 64;
    kHw = 16;
    PersistedCompile::SetUp();
  }
};

TEST_F(PersistedWinogradCompile, AWarmStartFindsTheTransformWithoutReadingTheFold) {
  const std::vector<float> plain = CompileAndRun(nullptr);
  SaveDerived();
  const std::vector<std::string> keys = SavedKeys();
  ASSERT_EQ(std::count_if(keys.begin(), keys.end(),
                          [](const std::string& k) { return k.find("winograd") != k.npos; }),
            1);  // the kernel took this shape
  std::vector<std::string> folds = FilesOfKind(dir_, "d:");
  ASSERT_EQ(folds.size(), 2u);  // weight and bias
  if (fs::file_size(folds[0]) < fs::file_size(folds[1])) std::swap(folds[0], folds[1]);
  // A damaged fold that is read fails its check and the compile with it.
  Damage(folds[0]);
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  files.InstallDeferredChecks();
  EXPECT_EQ(CompileAndRun(&files), plain);
  EXPECT_TRUE(fs::exists(folds[0]));
}

// A bias past what a deferred load reads in at once, which the oneDNN
// convolution copies while it is prepared without asking for it first: the
// compiler notices it was not read in, reads it in, and prepares the
// kernel again (read as it was handed out, the bias would be zeros).
class PersistedWideBiasCompile : public PersistedCompile {
 protected:
  void SetUp() override {
    kIc = 1;
    kOc = 20000;  // 80 KB of folded bias
    kHw = 1;
    PersistedCompile::SetUp();
  }
};

TEST_F(PersistedWideBiasCompile, BiasCopiedWhilePreparedIsReadInFirst) {
  const std::vector<float> plain = CompileAndRun(nullptr);
  SaveDerived();
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  files.InstallDeferredChecks();
  EXPECT_EQ(CompileAndRun(&files), plain);
  EXPECT_GT(files.checked_bytes(), 0u);
}

}  // namespace
}  // namespace kiln::cache
