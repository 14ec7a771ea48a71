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
#include "tests/cache/constant_files_fixture.h"
#include "tests/testing/proto_graph.h"

namespace kiln::cache {
namespace {

using namespace testing_support;  // NOLINT: the shared fixture

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
