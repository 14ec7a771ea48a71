#include "runtime/plan/waves.h"

namespace kiln::runtime {

WavePlan PlanWaves(const std::vector<std::vector<int>>& reads, const WaveLimits& limits) {
  const int n = static_cast<int>(reads.size());
  WavePlan plan;
  plan.order.reserve(n);
  plan.begin.push_back(0);
  std::vector<int> wave_of(n, -1);  // -1: not scheduled yet
  int first = 0;                    // the first step not scheduled yet
  while (first < n) {
    const int wave = plan.num_waves();
    wave_of[first] = wave;
    plan.order.push_back(first);
    int size = 1, looked = 0;
    for (int s = first + 1; s < n && looked < limits.lookahead && size < limits.max_steps; ++s) {
      if (wave_of[s] >= 0) continue;
      ++looked;
      bool ready = true;
      for (int r : reads[s]) {
        // Produced by an earlier wave; a step in this wave, or one passed
        // over (later), is not available yet.
        if (wave_of[r] < 0 || wave_of[r] == wave) {
          ready = false;
          break;
        }
      }
      if (!ready) continue;
      wave_of[s] = wave;
      plan.order.push_back(s);
      ++size;
    }
    plan.begin.push_back(static_cast<int>(plan.order.size()));
    while (first < n && wave_of[first] >= 0) ++first;
  }
  return plan;
}

}  // namespace kiln::runtime
