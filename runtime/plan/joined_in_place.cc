#include "runtime/plan/joined_in_place.h"

#include <algorithm>

namespace kiln::runtime {

JoinPlan ShareJoined(const std::vector<JoinCandidate>& candidates,
                     const std::vector<bool>& pinned,
                     const std::vector<int>& in_place_owner,
                     std::vector<BufferRequest>* requests) {
  std::vector<BufferRequest>& req = *requests;
  const int n = static_cast<int>(req.size());
  JoinPlan plan;
  plan.owner.resize(n);
  plan.offset_in_owner.assign(n, 0);
  for (int r = 0; r < n; ++r) plan.owner[r] = r;
  // Requests that share bytes with another one, either way round.
  std::vector<bool> shared(n, false);
  for (int r = 0; r < n; ++r) {
    if (in_place_owner[r] != r) shared[r] = shared[in_place_owner[r]] = true;
  }
  auto valid = [&](int r) { return r >= 0 && r < n; };
  for (const JoinCandidate& c : candidates) {
    // An output sharing bytes in place (a convolution writing over it
    // after its last read) would overwrite inputs read later.
    bool ok = valid(c.output) && !pinned[c.output] && !shared[c.output] &&
              plan.owner[c.output] == c.output && !c.pieces.empty() &&
              c.pieces.size() == c.offsets.size();
    for (size_t k = 0; ok && k < c.pieces.size(); ++k) {
      const int p = c.pieces[k];
      ok = valid(p) && p != c.output && !pinned[p] && !shared[p] && plan.owner[p] == p &&
           c.offsets[k] % kPlanAlignment == 0 && req[p].bytes > 0 &&
           c.offsets[k] + req[p].bytes <= req[c.output].bytes;
      // The same input twice (cat([x, x])) cannot be in two places.
      for (size_t j = 0; ok && j < k; ++j) ok = c.pieces[j] != p;
    }
    plan.joined.push_back(ok);
    if (!ok) continue;
    BufferRequest& out = req[c.output];
    for (size_t k = 0; k < c.pieces.size(); ++k) {
      const int p = c.pieces[k];
      plan.owner[p] = c.output;
      plan.offset_in_owner[p] = c.offsets[k];
      out.first = std::min(out.first, req[p].first);
      out.last = std::max(out.last, req[p].last);
      req[p].bytes = 0;
    }
    // A joined output holds others' bytes: it cannot itself be a piece.
    shared[c.output] = true;
  }
  return plan;
}

}  // namespace kiln::runtime
