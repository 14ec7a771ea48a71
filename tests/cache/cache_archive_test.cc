// Cache archives: what one directory exports another imports and uses
// (entries, the constants they use, lowering entries), and what an
// archive must not do to the directory importing it: records changed,
// sealed under another key, cut short, named to escape the directory, or
// made by another compiler are refused, and nothing of them is written.
#include "cache/cache_archive.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cache/compiler_version.h"
#include "cache/remote_value.h"
#include "gtest/gtest.h"
#include "kiln/v1/artifact.pb.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/sha256.h"
#include "tests/cache/constant_files_fixture.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing_support::Borrow;
using testing_support::Random;

CacheKey KeyOf(uint8_t b) {
  CacheKey k;
  k.fill(b);
  return k;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

std::string BytesOf(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string Bytes(const runtime::ConstantData& d) {
  return std::string(reinterpret_cast<const char*>(d.bytes.get()), static_cast<size_t>(d.size));
}

// An archive's header and records, as cache_archive.h lays them out.
template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void PutString(std::string* out, const std::string& s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}
std::string Header(const std::string& version = CompilerVersion()) {
  std::string h("KILNPAK\0", 8);
  Put<uint32_t>(&h, kCacheArchiveFormat);
  PutString(&h, version);
  PutString(&h, runtime::CpuFeatureString());
  return h;
}
std::string Record(uint8_t kind, const std::string& name, const std::string& value) {
  std::string r;
  Put<uint8_t>(&r, kind);
  PutString(&r, name);
  Put<uint64_t>(&r, value.size());
  return r + value;
}
std::string End(uint64_t records) {
  std::string r;
  Put<uint8_t>(&r, 0);
  Put<uint32_t>(&r, 0);
  Put<uint64_t>(&r, records);
  return r;
}

class CacheArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("kiln-cache-archive-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    weight_ = Random(1000, 1);
    fold_ = Random(500, 2);
    packed_ = Random(600, 3);
    other_ = Random(700, 4);
    weight_hash_ = runtime::Sha256Hex(BytesOf(weight_));
    // The source directory: one entry using a client weight, a fold and
    // its packed form; a derived constant no entry uses; a lowering entry.
    ArtifactStore store(Source());
    ConstantFiles files(&store);
    kiln::v1::Artifact artifact;
    artifact.mutable_graph()->add_nodes()->mutable_constant()->set_hash(weight_hash_);
    artifact.mutable_optimized()->add_nodes()->mutable_constant()->set_share_key("d:fold");
    artifact.set_arena_bytes(123);
    payload_ = artifact.SerializeAsString();
    store.Store(GraphKey(), payload_);
    files.SaveUploaded(weight_hash_, Borrow(weight_));
    files.Save("d:fold", Borrow(fold_));
    files.Save("pack|d:fold|ab|cd", Borrow(packed_));
    files.Save("d:other", Borrow(other_));
    files.Flush();
    fs::create_directories(fs::path(Source()) / "lowered");
    WriteFile(fs::path(Source()) / "lowered" / (std::string(64, 'c') + ".klow"), "lowering");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Source() const { return (root_ / "source").string(); }
  std::string Dest() const { return (root_ / "dest").string(); }
  std::string Archive() const { return (root_ / "cache.kpak").string(); }
  static std::string GraphKey() { return std::string(64, 'a'); }

  absl::StatusOr<ArchiveCounts> Export(const ArchiveSelection& selection = {},
                                       const CacheKey& key = KeyOf(7)) {
    ArtifactStore store(Source());
    ConstantFiles files(&store);
    return ExportCache(&store, &files, key, selection, Archive());
  }
  absl::StatusOr<ArchiveCounts> Import(const CacheKey& key = KeyOf(7)) {
    ArtifactStore store(Dest());
    ConstantFiles files(&store);
    return ImportCache(&store, &files, key, Archive());
  }

  fs::path root_;
  std::vector<float> weight_, fold_, packed_, other_;
  std::string weight_hash_, payload_;
};

TEST_F(CacheArchiveTest, WhatOneDirectoryExportsAnotherUses) {
  auto exported = Export();
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->artifacts, 1u);
  EXPECT_EQ(exported->derived, 3u);
  EXPECT_EQ(exported->uploaded, 1u);
  EXPECT_EQ(exported->lowerings, 1u);
  EXPECT_EQ(exported->refused, 0u);
  auto imported = Import();
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->artifacts, 1u);
  EXPECT_EQ(imported->derived, 3u);
  EXPECT_EQ(imported->uploaded, 1u);
  EXPECT_EQ(imported->lowerings, 1u);
  EXPECT_EQ(imported->refused, 0u);
  EXPECT_EQ(imported->bytes, exported->bytes);

  // Under the destination's own key, which differs from the source's.
  ArtifactStore store(Dest());
  ConstantFiles files(&store);
  EXPECT_NE(ReadFile(fs::path(Dest()) / "cache.key"), ReadFile(fs::path(Source()) / "cache.key"));
  EXPECT_EQ(store.Load(GraphKey()), payload_);
  auto fold = files.Load("d:fold", -1, /*defer_check=*/false);
  ASSERT_TRUE(fold.has_value());
  EXPECT_EQ(Bytes(*fold), BytesOf(fold_));
  auto packed = files.Load("pack|d:fold|ab|cd", -1, false);
  ASSERT_TRUE(packed.has_value());
  EXPECT_EQ(Bytes(*packed), BytesOf(packed_));
  EXPECT_TRUE(files.HasUploaded(weight_hash_));
  EXPECT_EQ(ReadFile(fs::path(Dest()) / "lowered" / (std::string(64, 'c') + ".klow")),
            "lowering");
}

TEST_F(CacheArchiveTest, ChosenEntriesTakeOnlyTheConstantsTheyUse) {
  auto exported = Export(ArchiveSelection{{"aaaa"}, 0});
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->artifacts, 1u);
  EXPECT_EQ(exported->derived, 2u);  // the fold and its packing, not d:other
  EXPECT_EQ(exported->uploaded, 1u);
  EXPECT_EQ(exported->lowerings, 0u);
  auto none = Export(ArchiveSelection{{"b"}, 0});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->artifacts + none->derived + none->uploaded + none->lowerings, 0u);
}

TEST_F(CacheArchiveTest, ExportingMarksNothingUsed) {
  const auto before = fs::last_write_time(ArtifactStore(Source()).PathFor(GraphKey()));
  fs::last_write_time(ArtifactStore(Source()).PathFor(GraphKey()),
                      before - std::chrono::hours(48));
  const auto aged = fs::last_write_time(ArtifactStore(Source()).PathFor(GraphKey()));
  ASSERT_TRUE(Export().ok());
  EXPECT_EQ(fs::last_write_time(ArtifactStore(Source()).PathFor(GraphKey())), aged);
  // And --used-within leaves the aged entry out.
  auto recent = Export(ArchiveSelection{{}, 3600});
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ(recent->artifacts, 0u);
}

TEST_F(CacheArchiveTest, ChangedRecordsAreRefusedAndTheRestImported) {
  ASSERT_TRUE(Export().ok());
  std::string archive = ReadFile(Archive());
  // The last byte of the last record before the end record: a lowering
  // entry's sealed payload.
  archive[archive.size() - End(0).size() - 1] ^= 0x01;
  WriteFile(Archive(), archive);
  auto imported = Import();
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->refused, 1u);
  EXPECT_EQ(imported->lowerings, 0u);
  EXPECT_EQ(imported->artifacts, 1u);
  EXPECT_FALSE(fs::exists(fs::path(Dest()) / "lowered" / (std::string(64, 'c') + ".klow")));
}

TEST_F(CacheArchiveTest, AnotherKeyOpensNothing) {
  ASSERT_TRUE(Export().ok());
  auto imported = Import(KeyOf(8));
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->refused, 6u);
  EXPECT_EQ(imported->artifacts + imported->derived + imported->uploaded + imported->lowerings, 0u);
  EXPECT_FALSE(ArtifactStore(Dest()).Load(GraphKey()).has_value());
}

TEST_F(CacheArchiveTest, ATruncatedArchiveSaysSo) {
  ASSERT_TRUE(Export().ok());
  const std::string archive = ReadFile(Archive());
  WriteFile(Archive(), archive.substr(0, archive.size() - End(0).size()));
  auto imported = Import();
  EXPECT_EQ(imported.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(ArtifactStore(Dest()).Load(GraphKey()).has_value());  // what came before is in
  WriteFile(Archive(), archive.substr(0, 20));
  EXPECT_EQ(Import().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CacheArchiveTest, AnotherCompilersArchiveIsRefusedWhole) {
  WriteFile(Archive(), Header("0.0.1+0000000000000000-dnnl0.0.0") + End(0));
  auto imported = Import();
  EXPECT_EQ(imported.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(imported.status().message().find("0.0.1+0000000000000000"), std::string::npos);
  WriteFile(Archive(), "not an archive at all");
  EXPECT_EQ(Import().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CacheArchiveTest, RecordsThatOpenButLieAreRefused) {
  const CacheKey key = KeyOf(7);
  auto seal = [&](const char* kind, const std::string& name, const std::string& payload) {
    return *SealRemoteValue(key, kind, name, payload);
  };
  const std::string wrong_bytes = BytesOf(other_);
  std::string archive = Header();
  // Names that would leave the directory or are not what their kind is.
  archive += Record(1, "../../escaped", seal("artifact", "../../escaped", payload_));
  archive += Record(4, "../escaped", seal("lowering", "../escaped", "x"));
  // Not an entry at all.
  archive += Record(1, std::string(64, 'b'), seal("artifact", std::string(64, 'b'), "\xff\xff"));
  // A client constant whose bytes are not the ones its hash names.
  archive += Record(3, "h:" + weight_hash_, seal("uploaded", "h:" + weight_hash_, wrong_bytes));
  // A derived constant posing as a client's, and a kind nobody knows.
  archive += Record(2, "h:" + weight_hash_, seal("derived", "h:" + weight_hash_, wrong_bytes));
  archive += Record(9, "x", "y");
  archive += End(6);
  WriteFile(Archive(), archive);
  auto imported = Import();
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->refused, 6u);
  EXPECT_FALSE(fs::exists(root_ / "escaped"));
  EXPECT_FALSE(fs::exists(fs::path(Dest()) / "escaped"));
  ArtifactStore store(Dest());
  ConstantFiles files(&store);
  EXPECT_FALSE(files.HasUploaded(weight_hash_));
  EXPECT_FALSE(store.Load(std::string(64, 'b')).has_value());
}

}  // namespace
}  // namespace kiln::cache
