// Derived constants (folds, packed weights) shared between compiled graphs
// by what they are: shape variants of one graph hold one copy, equal bytes
// at another address share it, new bytes at an old address do not, and a
// compiled graph keeps only the constants its runs read.
#include "runtime/compile/shared_constants.h"

#include <cstring>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/util/sha256.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::UniformFloats;

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
  std::vector<float> x = UniformFloats(batch * kIn, -1.f, 1.f, 7), y(batch * kOut, 0.f);
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

TEST(SharedConstants, ShapeVariantsShareOnePackedWeightAndKeepNoOther) {
  Weight w{std::vector<float>(kOut * kIn), ""};
  const std::vector<float> values = UniformFloats(kOut * kIn, -1.f, 1.f, 1);
  w.Set(values);
  const int64_t before = PackedConstantBytes();
  auto one = CompileLinear(w, 1, w.Resolver());
  ASSERT_NE(one, nullptr);
  const int64_t after_one = PackedConstantBytes();
  EXPECT_GE(after_one - before, kOut * kIn * int64_t{sizeof(float)});
  auto five = CompileLinear(w, 5, w.Resolver());
  ASSERT_NE(five, nullptr);
  EXPECT_EQ(PackedConstantBytes(), after_one);  // the variant packed nothing new
  // Runs read only the packed weight: neither graph keeps the client's
  // weight or its folded transpose.
  EXPECT_TRUE(one->owned_constants.empty());
  EXPECT_TRUE(five->owned_constants.empty());
  EXPECT_LT(LinearError(*one, values, 1), 1e-4);
  EXPECT_LT(LinearError(*five, values, 5), 1e-4);
  one.reset();
  EXPECT_EQ(PackedConstantBytes(), after_one);  // `five` still uses it
  five.reset();
  EXPECT_EQ(PackedConstantBytes(), before);
}

TEST(SharedConstants, EqualBytesElsewhereShareByKey) {
  // The same weight uploaded again lives at another address: what was
  // derived from it is found by what it is, not where it is.
  const std::vector<float> values = UniformFloats(kOut * kIn, -1.f, 1.f, 4);
  Weight a{std::vector<float>(kOut * kIn), ""}, b{std::vector<float>(kOut * kIn), ""};
  a.Set(values);
  b.Set(values);
  auto first = CompileLinear(a, 2, a.Resolver());
  ASSERT_NE(first, nullptr);
  const int64_t packed = PackedConstantBytes();
  auto second = CompileLinear(b, 3, b.Resolver());
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(PackedConstantBytes(), packed);
  EXPECT_LT(LinearError(*second, values, 3), 1e-4);
}

TEST(SharedConstants, NewBytesAtAnOldAddressAreNotServedStale) {
  // The second weight lives at the first one's address, as freed and
  // reallocated memory would: nothing derived from the first may be reused.
  Weight w{std::vector<float>(kOut * kIn), ""};
  const std::vector<float> first = UniformFloats(kOut * kIn, -1.f, 1.f, 2);
  const std::vector<float> second = UniformFloats(kOut * kIn, -1.f, 1.f, 3);
  w.Set(first);
  auto cg = CompileLinear(w, 3, w.Resolver());
  ASSERT_NE(cg, nullptr);
  EXPECT_LT(LinearError(*cg, first, 3), 1e-4);
  w.Set(second);  // while the first graph lives
  auto other = CompileLinear(w, 3, w.Resolver());
  ASSERT_NE(other, nullptr);
  EXPECT_LT(LinearError(*other, second, 3), 1e-4);
  EXPECT_LT(LinearError(*cg, first, 3), 1e-4);
}

TEST(SharedConstants, ConstantsRunsReadStayOwned) {
  GraphBuilder b;
  std::vector<float> bias(kIn);
  for (int64_t i = 0; i < kIn; ++i) bias[i] = static_cast<float>(i);
  Weight c{std::vector<float>(kIn), ""};
  c.Set(bias);
  int x = b.Input({2, kIn});
  int k = b.Constant(c.values, {kIn});
  b.Output(b.Call("aten.add.Tensor", {Ref(x), Ref(k)}));
  auto cg = Compile(*GraphFromProto(b.graph()), c.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ((*cg)->owned_constants.size(), 1u);
  std::vector<float> in(2 * kIn, 1.f), out(2 * kIn, 0.f);
  const void* inputs[] = {in.data()};
  void* outputs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
  EXPECT_EQ(out[kIn + 5], 6.f);
}

}  // namespace
}  // namespace kiln::runtime
