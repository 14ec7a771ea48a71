#include "runtime/plan/in_place.h"

#include <algorithm>

namespace kiln::runtime {

std::vector<int> ShareInPlace(const std::vector<InPlaceCandidate>& candidates,
                              const std::vector<std::vector<int>>& reads_in_wave,
                              std::vector<BufferRequest>* requests) {
  std::vector<BufferRequest>& req = *requests;
  std::vector<int> owner(req.size());
  for (size_t r = 0; r < req.size(); ++r) owner[r] = static_cast<int>(r);
  // Owners are always roots: a merged request points at a request that was
  // never merged itself.
  auto root = [&](int r) { return owner[r]; };

  std::vector<const InPlaceCandidate*> order;
  for (const InPlaceCandidate& c : candidates) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(),
                   [](const InPlaceCandidate* a, const InPlaceCandidate* b) {
                     return a->wave < b->wave;
                   });
  for (const InPlaceCandidate* c : order) {
    if (c->input < 0 || c->output < 0 || c->input == c->output) continue;
    if (owner[c->output] != c->output) continue;
    const int r = root(c->input);
    // A merged request keeps no bytes of its own: compare with its owner.
    if (req[r].bytes != req[c->output].bytes || req[r].last != c->wave) continue;
    if (req[c->output].first != c->wave) continue;
    bool read_elsewhere = false;
    for (int other : c->other_reads) {
      if (other >= 0 && root(other) == r) read_elsewhere = true;
    }
    int reads = 0;
    if (c->wave >= 0 && c->wave < static_cast<int>(reads_in_wave.size())) {
      for (int read : reads_in_wave[c->wave]) {
        if (read >= 0 && root(read) == r) ++reads;
      }
    }
    if (read_elsewhere || reads != 1) continue;
    owner[c->output] = r;
    req[r].last = std::max(req[r].last, req[c->output].last);
    req[c->output].bytes = 0;
  }
  return owner;
}

}  // namespace kiln::runtime
