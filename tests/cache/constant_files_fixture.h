// What the constant-file tests share: random weights, a borrowed
// ConstantData, the files of a directory, a persistence that counts, and
// the fixture that gives each test its own cache directory.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cache/constant_files.h"
#include "gtest/gtest.h"
#include "runtime/compile/constant_persistence.h"
#include "tests/testing/proto_graph.h"

namespace kiln::cache::testing_support {


namespace fs = std::filesystem;
using kiln::testing::Bool;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;

inline std::vector<float> Random(size_t n, unsigned seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline runtime::ConstantData Borrow(const std::vector<float>& v) {
  return runtime::ConstantData{
      std::shared_ptr<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                     [](const uint8_t*) {}),
      static_cast<int64_t>(v.size() * sizeof(float))};
}

inline std::vector<std::string> Files(const fs::path& dir) {
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

}  // namespace kiln::cache::testing_support
