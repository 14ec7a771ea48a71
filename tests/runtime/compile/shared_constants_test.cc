// Derived constants (folds, packed weights) shared between compiled graphs:
// shape variants of one graph hold one copy, and nothing stale is shared
// when a weight's address is reused for other bytes.
#include "runtime/compile/shared_constants.h"

#include <cstring>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/util/sha256.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::GraphBuilder;
using kiln::testing::Ref;

constexpr int64_t kIn = 64, kOut = 48;

// One weight in caller-owned storage, resolvable by its hash, as the
// daemon's constant store would hand it out (the caller keeps it alive).
struct Weight {
  std::vector<float> values;
  std::string hash;
  void Set(const std::vector<float>& v) {
    std::memcpy(values.data(), v.data(), v.size() * sizeof(float));
    hash = Sha256Hex(values.data(), values.size() * sizeof(float));
  }
  ConstantResolver Resolver() {
    return [this](const std::string& h) -> absl::StatusOr<ConstantData> {
      if (h != hash) return absl::NotFoundError(h);
      return ConstantData{std::shared_ptr<const uint8_t>(
                              reinterpret_cast<const uint8_t*>(values.data()), [](const uint8_t*) {}),
                          static_cast<int64_t>(values.size() * sizeof(float))};
    };
  }
};

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// x [batch, kIn] @ t(w [kOut, kIn]): the transpose folds at compile time
// and the matmul packs the folded weight.
std::unique_ptr<CompiledGraph> CompileLinear(const Weight& w, int64_t batch,
                                             const ConstantResolver& resolve) {
  GraphBuilder b;
  int x = b.Input({batch, kIn});
  int c = b.Constant(w.values, {kOut, kIn});
  int t = b.Call("aten.t.default", {Ref(c)});
  b.Output(b.Call("aten.mm.default", {Ref(x), Ref(t)}));
  auto ir = GraphFromProto(b.graph());
  EXPECT_TRUE(ir.ok()) << ir.status();
  auto cg = Compile(*std::move(ir), resolve);
  EXPECT_TRUE(cg.ok()) << cg.status();
  return cg.ok() ? *std::move(cg) : nullptr;
}

// Max |compiled - reference| for one random input.
double LinearError(const CompiledGraph& cg, const std::vector<float>& w, int64_t batch) {
  std::vector<float> x = Random(batch * kIn, 7), y(batch * kOut, 0.f);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  EXPECT_TRUE(Execute(cg, in, out).ok());
  double worst = 0;
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t o = 0; o < kOut; ++o) {
      double want = 0;
      for (int64_t k = 0; k < kIn; ++k) want += double{x[i * kIn + k]} * w[o * kIn + k];
      worst = std::max(worst, std::abs(want - y[i * kOut + o]));
    }
  }
  return worst;
}

std::set<const void*> Owned(const CompiledGraph& cg) {
  std::set<const void*> out;
  for (const ConstantData& c : cg.owned_constants) out.insert(c.bytes.get());
  return out;
}

TEST(SharedConstants, ShapeVariantsShareFoldedAndPackedWeights) {
  Weight w{std::vector<float>(kOut * kIn), ""};
  const std::vector<float> values = Random(kOut * kIn, 1);
  w.Set(values);
  const int64_t before = PackedConstantBytes();
  auto one = CompileLinear(w, 1, w.Resolver());
  ASSERT_NE(one, nullptr);
  const int64_t after_one = PackedConstantBytes();
  EXPECT_GE(after_one - before, kOut * kIn * int64_t{sizeof(float)});
  auto five = CompileLinear(w, 5, w.Resolver());
  ASSERT_NE(five, nullptr);
  // The variant packed nothing new and owns the same folded transpose.
  EXPECT_EQ(PackedConstantBytes(), after_one);
  std::set<const void*> a = Owned(*one), b = Owned(*five), common;
  for (const void* p : a) {
    if (b.count(p)) common.insert(p);
  }
  EXPECT_EQ(common.size(), 2u);  // the client's weight and its transpose
  EXPECT_LT(LinearError(*one, values, 1), 1e-4);
  EXPECT_LT(LinearError(*five, values, 5), 1e-4);
  one.reset();
  EXPECT_EQ(PackedConstantBytes(), after_one);  // `five` still uses it
  five.reset();
  EXPECT_EQ(PackedConstantBytes(), before);
}

TEST(SharedConstants, ReusedAddressWithNewBytesIsNotServedStale) {
  // The second weight lives at the first one's address, as freed and
  // reallocated memory would: nothing derived from the first may be reused.
  Weight w{std::vector<float>(kOut * kIn), ""};
  const std::vector<float> first = Random(kOut * kIn, 2), second = Random(kOut * kIn, 3);
  w.Set(first);
  auto cg = CompileLinear(w, 3, w.Resolver());
  ASSERT_NE(cg, nullptr);
  EXPECT_LT(LinearError(*cg, first, 3), 1e-4);
  cg.reset();
  w.Set(second);
  cg = CompileLinear(w, 3, w.Resolver());
  ASSERT_NE(cg, nullptr);
  EXPECT_LT(LinearError(*cg, second, 3), 1e-4);
}

ConstantData Bytes(const std::vector<uint8_t>& v) {
  auto* p = new uint8_t[v.size()];
  std::memcpy(p, v.data(), v.size());
  return ConstantData{std::shared_ptr<const uint8_t>(p, std::default_delete<uint8_t[]>()),
                      static_cast<int64_t>(v.size())};
}

TEST(SharedConstants, InternReturnsLiveEqualBytesOnly) {
  std::vector<uint8_t> content(kMinSharedConstantBytes * 2, 7);
  ConstantData first = InternConstant(Bytes(content));
  ConstantData same = InternConstant(Bytes(content));
  EXPECT_EQ(same.bytes.get(), first.bytes.get());
  content.back() = 8;  // one byte differs
  ConstantData other = InternConstant(Bytes(content));
  EXPECT_NE(other.bytes.get(), first.bytes.get());
  // Small constants are left alone.
  std::vector<uint8_t> small(16, 1);
  ConstantData s1 = InternConstant(Bytes(small)), s2 = InternConstant(Bytes(small));
  EXPECT_NE(s1.bytes.get(), s2.bytes.get());
  // Once released, equal bytes are not matched to the dead entry.
  content.back() = 7;
  first = {};
  same = {};
  ConstantData again = InternConstant(Bytes(content));
  ASSERT_NE(again.bytes, nullptr);
  EXPECT_EQ(std::memcmp(again.bytes.get(), content.data(), content.size()), 0);
}

}  // namespace
}  // namespace kiln::runtime
