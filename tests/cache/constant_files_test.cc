// Constants saved in the cache directory: what one daemon saves another
// reads back byte for byte; a damaged, truncated or other-version file, a
// derived file without a valid MAC, a client's weight whose bytes are not
// its hash, or an entry that is not a usable file (FIFO, link, other owner
// or mode, larger than its header says) is removed and is a miss; the bytes
// handed out are the checked copy, whatever the file does after; the files
// count toward the cache's size cap; and a compile with persistence reads
// the batch-norm-folded and packed weights an earlier compile saved instead
// of deriving them, with the same result.
#include "cache/constant_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <vector>

#include "cache/constant_store.h"
#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/util/sha256.h"
#include "tests/testing/proto_graph.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using kiln::testing::Bool;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;

std::vector<float> Random(size_t n, unsigned seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

runtime::ConstantData Borrow(const std::vector<float>& v) {
  return runtime::ConstantData{
      std::shared_ptr<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                     [](const uint8_t*) {}),
      static_cast<int64_t>(v.size() * sizeof(float))};
}

std::vector<std::string> Files(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir / "constants", ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) out.push_back(it->path().string());
  }
  return out;
}

// Counts what a compile found saved and what it saved, passing everything
// to the real files.
class Counting : public runtime::ConstantPersistence {
 public:
  explicit Counting(ConstantFiles* files) : files_(files) {}
  std::optional<runtime::ConstantData> Load(const std::string& key, int64_t size,
                                            bool defer_check) override {
    auto got = files_->Load(key, size, defer_check);
    (got ? hits : misses)++;
    return got;
  }
  void Save(const std::string& key, runtime::ConstantData data) override {
    saves++;
    files_->Save(key, std::move(data));
  }
  int hits = 0, misses = 0, saves = 0;

 private:
  ConstantFiles* files_;
};

class ConstantFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-constant-files-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Saves `v` under `key` with one "daemon" and returns the file's path.
  std::string SaveOne(const std::string& key, const std::vector<float>& v) {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    files.Save(key, Borrow(v));
    files.Flush();
    return files.PathFor(key, /*derived=*/true);
  }

  fs::path dir_;
};

TEST_F(ConstantFilesTest, AnotherDaemonReadsWhatOneSaved) {
  const std::vector<float> v = Random(10000, 1);
  const std::string path = SaveOne("d:weights", v);
  ASSERT_TRUE(fs::exists(path));
  EXPECT_EQ(fs::file_size(path), kConstantFileHeaderBytes + v.size() * sizeof(float));

  ArtifactStore store(dir_.string());
  EXPECT_EQ(store.total_bytes(), fs::file_size(path));  // counted with the entries
  ConstantFiles files(&store);
  auto got = files.Load("d:weights", static_cast<int64_t>(v.size() * sizeof(float)), false);
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->size, static_cast<int64_t>(v.size() * sizeof(float)));
  EXPECT_EQ(std::memcmp(got->bytes.get(), v.data(), got->size), 0);
  // Page-aligned, as the kernels' own buffers are (at least) 64-aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got->bytes.get()) % 4096, 0u);
  EXPECT_FALSE(files.Load("d:other", got->size, false).has_value());
}

TEST_F(ConstantFilesTest, DamagedFilesAreRemovedAndMiss) {
  const std::vector<float> v = Random(5000, 2);
  const int64_t size = static_cast<int64_t>(v.size() * sizeof(float));
  struct Damage {
    const char* what;
    void (*apply)(const std::string& path);
  };
  const Damage damages[] = {
      {"flipped payload byte",
       [](const std::string& p) {
         std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(kConstantFileHeaderBytes + 1234);
         f.put('\x5a');
       }},
      {"truncated payload", [](const std::string& p) { fs::resize_file(p, fs::file_size(p) - 100); }},
      {"truncated header", [](const std::string& p) { fs::resize_file(p, 100); }},
      {"other format version",
       [](const std::string& p) {
         std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(8);
         const uint32_t version = kConstantFileFormatVersion + 1;
         f.write(reinterpret_cast<const char*>(&version), 4);
       }},
  };
  for (const Damage& d : damages) {
    const std::string path = SaveOne("d:w", v);
    d.apply(path);
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    EXPECT_FALSE(files.Load("d:w", size, false).has_value()) << d.what;
    EXPECT_FALSE(fs::exists(path)) << d.what;
    EXPECT_EQ(store.total_bytes(), 0u) << d.what;
  }
}

TEST_F(ConstantFilesTest, UploadedConstantsComeBackThroughTheStore) {
  const std::vector<float> v = Random(3000, 3);
  const std::string hash = runtime::Sha256Hex(v.data(), v.size() * sizeof(float));
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    files.SaveUploaded(hash, Borrow(v));
    files.Flush();
  }
  // A restarted daemon: the in-memory store is empty, the file is not.
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  ConstantStore constants;
  EXPECT_FALSE(constants.Contains(hash));
  constants.SetFiles(&files);
  EXPECT_TRUE(constants.Contains(hash));
  auto got = constants.Get(hash, static_cast<int64_t>(v.size() * sizeof(float)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::memcmp(got->bytes.get(), v.data(), v.size() * sizeof(float)), 0);
  EXPECT_EQ(constants.count(), 1u);
  // Already there: an upload is not stored twice.
  auto put = constants.PutCopy(hash, v.data(), static_cast<int64_t>(v.size() * sizeof(float)));
  ASSERT_TRUE(put.ok());
  EXPECT_FALSE(*put);
}

TEST_F(ConstantFilesTest, DisabledStoreSavesAndFindsNothing) {
  ArtifactStore store("");
  ConstantFiles files(&store);
  const std::vector<float> v = Random(100, 4);
  files.Save("d:x", Borrow(v));
  files.Flush();
  EXPECT_FALSE(files.Load("d:x", 400, false).has_value());
  EXPECT_FALSE(files.HasUploaded("abc"));
}

TEST_F(ConstantFilesTest, UnwritableDirectoryStopsSavingQuietly) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "constants") << "a file where the directory should be";
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  const std::vector<float> v = Random(100, 5);
  files.Save("d:x", Borrow(v));
  files.Save("d:y", Borrow(v));
  files.Flush();
  EXPECT_FALSE(files.Load("d:x", 400, false).has_value());
  EXPECT_TRUE(store.enabled());  // compiled graphs are still cached
}

TEST_F(ConstantFilesTest, FilesAreEvictedUnderTheCacheCap) {
  const std::vector<float> v = Random(64 * 1024, 6);  // 256 KiB each
  const uint64_t file = kConstantFileHeaderBytes + v.size() * sizeof(float);
  ArtifactStore store(dir_.string(), /*max_bytes=*/3 * file);
  ConstantFiles files(&store);
  for (int i = 0; i < 5; ++i) {
    files.Save("d:" + std::to_string(i), Borrow(v));
    files.Flush();
  }
  EXPECT_LE(store.total_bytes(), 3 * file);
  EXPECT_EQ(Files(dir_).size(), 3u);
  // The most recent survive.
  EXPECT_TRUE(files.Load("d:4", static_cast<int64_t>(v.size() * 4), false).has_value());
  EXPECT_FALSE(files.Load("d:0", static_cast<int64_t>(v.size() * 4), false).has_value());
}

TEST_F(ConstantFilesTest, KeyFileOthersMayReadRefusesTheCache) {
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    ASSERT_TRUE(store.enabled());
  }
  fs::permissions(dir_ / kCacheKeyFile, fs::perms::group_read, fs::perm_options::add);
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  EXPECT_FALSE(store.enabled());
  files.Save("d:x", Borrow(Random(100, 28)));
  files.Flush();
  EXPECT_TRUE(Files(dir_).empty());
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `from`'s file written at `to`'s path with `to`'s key in its header: a
// file that passes every check but the one binding bytes to their name.
void PlantUnder(const std::string& from_path, const std::string& to_path,
                const std::string& to_key) {
  std::string data = Read(from_path);
  const uint32_t length = static_cast<uint32_t>(to_key.size());
  std::memcpy(data.data() + 12, &length, 4);
  std::memcpy(data.data() + 32, to_key.data(), to_key.size());
  fs::create_directories(fs::path(to_path).parent_path());
  std::ofstream(to_path, std::ios::binary | std::ios::trunc) << data;
  fs::permissions(to_path, fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(ConstantFilesTest, DerivedFileWithoutAValidMacIsAMissAndRemoved) {
  const std::vector<float> a = Random(2000, 20), b = Random(2000, 21);
  const int64_t size = static_cast<int64_t>(a.size() * sizeof(float));
  const std::string a_path = SaveOne("d:a", a);
  const std::string b_path = SaveOne("d:b", b);
  PlantUnder(a_path, b_path, "d:b");
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    EXPECT_FALSE(files.Load("d:b", size, false).has_value());
    EXPECT_FALSE(fs::exists(b_path));
    EXPECT_TRUE(files.Load("d:a", size, false).has_value());
  }
  // Written under another directory's key: not this one's either.
  fs::remove(dir_ / kCacheKeyFile);
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  EXPECT_FALSE(files.Load("d:a", size, false).has_value());
  EXPECT_FALSE(fs::exists(a_path));
}

TEST_F(ConstantFilesTest, UploadedFileWhoseBytesAreNotItsHashIsAMissAndRemoved) {
  const std::vector<float> a = Random(2000, 22), b = Random(2000, 23);
  const int64_t size = static_cast<int64_t>(a.size() * sizeof(float));
  const std::string a_hash = runtime::Sha256Hex(a.data(), static_cast<size_t>(size));
  const std::string b_hash = runtime::Sha256Hex(b.data(), static_cast<size_t>(size));
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    files.SaveUploaded(a_hash, Borrow(a));
    files.Flush();
  }
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  const std::string b_path = files.PathFor(runtime::StoreConstantKey(b_hash), false);
  PlantUnder(files.PathFor(runtime::StoreConstantKey(a_hash), false), b_path,
             runtime::StoreConstantKey(b_hash));
  EXPECT_TRUE(files.HasUploaded(b_hash));  // the header is right; the bytes are read later
  EXPECT_FALSE(files.LoadUploaded(b_hash, size).has_value());
  EXPECT_FALSE(fs::exists(b_path));
  EXPECT_FALSE(files.HasUploaded(b_hash));
  auto got = files.LoadUploaded(a_hash, size);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::memcmp(got->bytes.get(), a.data(), static_cast<size_t>(size)), 0);
  // Another size than the graph asks for: a miss, and the file stays (the
  // graph may be what is wrong).
  EXPECT_FALSE(files.LoadUploaded(a_hash, size - 4).has_value());
  EXPECT_TRUE(files.HasUploaded(a_hash));
}

TEST_F(ConstantFilesTest, BytesHandedOutAreTheCheckedCopyWhateverTheFileDoesAfter) {
  const std::vector<float> v = Random(300000, 24);
  const int64_t size = static_cast<int64_t>(v.size() * sizeof(float));
  const std::string path = SaveOne("d:w", v);
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  auto got = files.Load("d:w", size, /*defer_check=*/false);
  ASSERT_TRUE(got.has_value());
  // Rewritten, then truncated: a mapping of the file would now read other
  // bytes, then fault (SIGBUS) on the pages past the end.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kConstantFileHeaderBytes);
    const std::string zeros(static_cast<size_t>(size), '\0');
    f.write(zeros.data(), size);
  }
  fs::resize_file(path, 0);
  EXPECT_EQ(std::memcmp(got->bytes.get(), v.data(), static_cast<size_t>(size)), 0);
}

TEST_F(ConstantFilesTest, DeferredCheckIsOfTheCopyReadAtTheLoad) {
  const std::vector<float> v = Random(5000, 25), other = Random(5000, 26);
  const int64_t size = static_cast<int64_t>(v.size() * sizeof(float));
  const std::string path = SaveOne("d:w", v);
  auto overwrite = [&](const std::vector<float>& with) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kConstantFileHeaderBytes);
    f.write(reinterpret_cast<const char*>(with.data()), size);
  };
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  files.InstallDeferredChecks();
  // Loaded while good, changed before its check: the check is of the copy
  // the daemon holds (and hands out), which is still good.
  auto good = files.Load("d:w", size, /*defer_check=*/true);
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(files.checked_bytes(), 0u);  // nothing checked yet
  overwrite(other);
  EXPECT_TRUE(files.CheckBeforeRead(good->bytes.get()));
  EXPECT_EQ(std::memcmp(good->bytes.get(), v.data(), static_cast<size_t>(size)), 0);

  // Loaded while bad, replaced by a good file (as another daemon writes
  // one: a new file renamed into place) before its check: what was handed
  // out is bad, and so is the check; the good file is not deleted.
  const std::string saved_good = path + ".good";
  fs::copy_file(path, saved_good);
  {
    std::fstream f(saved_good, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kConstantFileHeaderBytes);
    f.write(reinterpret_cast<const char*>(v.data()), size);
  }
  auto bad = files.Load("d:w", size, /*defer_check=*/true);
  ASSERT_TRUE(bad.has_value());
  fs::rename(saved_good, path);
  EXPECT_FALSE(files.CheckBeforeRead(bad->bytes.get()));
  EXPECT_TRUE(files.IsBad(bad->bytes.get()));
  EXPECT_TRUE(files.Load("d:w", size, /*defer_check=*/false).has_value());
}

TEST_F(ConstantFilesTest, EntriesThatAreNotUsableFilesAreMissesAndRemoved) {
  const std::vector<float> v = Random(1000, 27);
  const int64_t size = static_cast<int64_t>(v.size() * sizeof(float));
  const std::string hash = runtime::Sha256Hex(v.data(), static_cast<size_t>(size));
  const std::string path = SaveOne("d:w", v);
  const std::string good = Read(path);
  struct Plant {
    const char* what;
    std::function<void()> apply;
  };
  const Plant plants[] = {
      {"FIFO", [&] { ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0); }},
      {"link to /dev/zero", [&] { fs::create_symlink("/dev/zero", path); }},
      {"mode 000",
       [&] {
         std::ofstream(path, std::ios::binary) << good;
         ::chmod(path.c_str(), 0);
       }},
      {"group-writable",
       [&] {
         std::ofstream(path, std::ios::binary) << good;
         ::chmod(path.c_str(), 0620);
       }},
      {"larger than its header says",
       [&] {
         std::ofstream(path, std::ios::binary) << good;
         ::chmod(path.c_str(), 0600);
         fs::resize_file(path, uint64_t{64} << 30);  // sparse
       }},
  };
  for (const Plant& p : plants) {
    fs::remove(path);
    p.apply();
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    EXPECT_FALSE(files.Load("d:w", size, false).has_value()) << p.what;
    EXPECT_EQ(files.checked_bytes(), 0u) << p.what;
    EXPECT_FALSE(fs::exists(fs::symlink_status(path))) << p.what;
  }
  if (::geteuid() == 0) {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    files.SaveUploaded(hash, Borrow(v));
    files.Flush();
    const std::string uploaded = files.PathFor(runtime::StoreConstantKey(hash), false);
    ASSERT_EQ(::chown(uploaded.c_str(), 65534, 0), 0);
    EXPECT_FALSE(files.HasUploaded(hash));  // asked again, the client uploads it
    EXPECT_FALSE(fs::exists(uploaded));
  }
}

// conv -> batch norm -> relu: compiling folds the batch norm into the
// convolution's weight and bias and packs the folded weight.
class PersistedCompile : public ConstantFilesTest {
 protected:
  int64_t kIc = 8, kOc = 16, kHw = 10;  // set before SetUp builds the graph

  kiln::v1::Graph Build() {
    GraphBuilder b;
    const int x = b.Input({2, kIc, kHw, kHw}, "x");
    auto constant = [&](std::vector<int64_t> shape, float lo, float hi) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      weights_.push_back(Random(n, static_cast<unsigned>(weights_.size()) + 10, lo, hi));
      return b.Constant(weights_.back(), shape);
    };
    const int conv = b.Call("aten.convolution.default",
                            {Ref(x), Ref(constant({kOc, kIc, 3, 3}, -0.3f, 0.3f)),
                             Ref(constant({kOc}, -0.1f, 0.1f)), IntList({1, 1}),
                             IntList({1, 1}), IntList({1, 1}), Bool(false), IntList({0, 0}),
                             Int(1)},
                            "conv");
    const int bn = b.Call("aten.native_batch_norm.default",
                          {Ref(conv), Ref(constant({kOc}, 0.5f, 1.5f)),
                           Ref(constant({kOc}, -0.5f, 0.5f)), Ref(constant({kOc}, -0.2f, 0.2f)),
                           Ref(constant({kOc}, 0.5f, 2.f)), Bool(false), Float(0.1),
                           Float(1e-5)},
                          "bn");
    b.Output(b.Call("aten.relu.default", {Ref(bn, 0)}, "relu"));
    return b.graph();
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
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    CompileAndRun(&files);
    files.Flush();
  }
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
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    CompileAndRun(&files);
    files.Flush();
  }
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
  {
    ArtifactStore store(dir_.string());
    ConstantFiles files(&store);
    CompileAndRun(&files);
    files.Flush();
  }
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  files.InstallDeferredChecks();
  EXPECT_EQ(CompileAndRun(&files), plain);
  EXPECT_GT(files.checked_bytes(), 0u);
}

TEST_F(ConstantFilesTest, LargeDeferredLoadIsReadInAndCheckedWhenFirstNeeded) {
  const std::vector<float> v = Random(100000, 29), other = Random(100000, 30);
  const int64_t size = static_cast<int64_t>(v.size() * sizeof(float));
  const std::string path = SaveOne("d:w", v);
  const std::string good = Read(path);
  ArtifactStore store(dir_.string());
  ConstantFiles files(&store);
  files.InstallDeferredChecks();
  auto first = files.Load("d:w", size, /*defer_check=*/true);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(files.NotReadIn(first->bytes.get()));
  EXPECT_EQ(files.checked_bytes(), 0u);
  EXPECT_TRUE(files.CheckBeforeRead(first->bytes.get()));
  EXPECT_FALSE(files.NotReadIn(first->bytes.get()));
  EXPECT_EQ(std::memcmp(first->bytes.get(), v.data(), static_cast<size_t>(size)), 0);
  // Changed between the load and the first read: what is read in is the
  // change, and it fails.
  auto second = files.Load("d:w", size, /*defer_check=*/true);
  ASSERT_TRUE(second.has_value());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kConstantFileHeaderBytes);
    f.write(reinterpret_cast<const char*>(other.data()), size);
  }
  EXPECT_FALSE(files.CheckBeforeRead(second->bytes.get()));
  EXPECT_FALSE(fs::exists(path));
  // Gone before the first read: a miss for the compile, not a crash.
  {
    std::ofstream(path, std::ios::binary) << good;
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  }
  auto third = files.Load("d:w", size, /*defer_check=*/true);
  ASSERT_TRUE(third.has_value());
  fs::remove(path);
  EXPECT_FALSE(files.CheckBeforeRead(third->bytes.get()));
}

}  // namespace
}  // namespace kiln::cache
