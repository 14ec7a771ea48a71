// PlanWaves: independent steps share a wave, dependent ones never do, the
// order stays topological and close to the given one.
#include "runtime/plan/waves.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// The wave of every step, checking the plan covers each step once.
std::vector<int> WaveOf(const WavePlan& plan, int n) {
  std::vector<int> wave(n, -1);
  EXPECT_EQ(static_cast<int>(plan.order.size()), n);
  for (int w = 0; w < plan.num_waves(); ++w) {
    EXPECT_LT(plan.begin[w], plan.begin[w + 1]) << "empty wave " << w;
    for (int i = plan.begin[w]; i < plan.begin[w + 1]; ++i) {
      EXPECT_EQ(wave[plan.order[i]], -1) << "step " << plan.order[i] << " scheduled twice";
      wave[plan.order[i]] = w;
    }
  }
  return wave;
}

TEST(PlanWaves, DiamondBranchesShareAWave) {
  // 0 -> {1, 2} -> 3: a squeeze convolution, two expand convolutions, cat.
  const WavePlan plan = PlanWaves({{}, {0}, {0}, {1, 2}}, WaveLimits());
  EXPECT_EQ(plan.order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan.begin, (std::vector<int>{0, 1, 3, 4}));
}

TEST(PlanWaves, NoLookaheadKeepsEveryStepAlone) {
  WaveLimits limits;
  limits.lookahead = 0;
  const WavePlan plan = PlanWaves({{}, {0}, {0}, {1, 2}}, limits);
  EXPECT_EQ(plan.order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan.num_waves(), 4);
}

TEST(PlanWaves, PullsALaterIndependentStepForward) {
  // q = x@Wq, q' = perm(q), k = x@Wk, k' = perm(k), v = x@Wv, v' = perm(v),
  // attention(q', k', v'): the projections go together, then the permutes.
  const WavePlan plan =
      PlanWaves({{}, {0}, {}, {2}, {}, {4}, {1, 3, 5}}, WaveLimits());
  EXPECT_EQ(plan.order, (std::vector<int>{0, 2, 4, 1, 3, 5, 6}));
  EXPECT_EQ(plan.begin, (std::vector<int>{0, 3, 6, 7}));
}

TEST(PlanWaves, StepReadingAPassedOverStepWaits) {
  // 1 reads 0 (same wave: no); 2 reads 1, which was passed over: no.
  const WavePlan plan = PlanWaves({{}, {0}, {1}}, WaveLimits());
  EXPECT_EQ(plan.num_waves(), 3);
}

TEST(PlanWaves, WavesHoldAtMostMaxSteps) {
  std::vector<std::vector<int>> reads(10);  // ten independent steps
  WaveLimits limits;
  limits.max_steps = 3;
  const WavePlan plan = PlanWaves(reads, limits);
  EXPECT_EQ(plan.begin, (std::vector<int>{0, 3, 6, 9, 10}));
}

TEST(PlanWaves, RandomGraphsGiveTopologicalIndependentWaves) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(gen() % 40);
    std::vector<std::vector<int>> reads(n);
    for (int s = 1; s < n; ++s) {
      const int k = static_cast<int>(gen() % 3);
      for (int j = 0; j < k; ++j) reads[s].push_back(static_cast<int>(gen() % s));
    }
    WaveLimits limits;
    limits.lookahead = static_cast<int>(gen() % 10);
    limits.max_steps = 1 + static_cast<int>(gen() % 5);
    const WavePlan plan = PlanWaves(reads, limits);
    const std::vector<int> wave = WaveOf(plan, n);
    for (int s = 0; s < n; ++s) {
      for (int r : reads[s]) {
        EXPECT_LT(wave[r], wave[s]) << "trial " << trial << ": step " << s << " reads " << r;
      }
    }
    for (int w = 0; w < plan.num_waves(); ++w) {
      EXPECT_LE(plan.begin[w + 1] - plan.begin[w], limits.max_steps);
    }
  }
}

}  // namespace
}  // namespace kiln::runtime
