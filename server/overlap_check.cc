#include "server/overlap_check.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

std::string Name(const TensorSpan& s) {
  return absl::StrCat(s.output ? "output " : "input ", s.index);
}

}  // namespace

absl::Status CheckOutputsDisjoint(absl::Span<TensorSpan> spans,
                                  absl::Span<const OutputOverInput> may_coincide) {
  // An input that its output covers exactly is that output's own bytes:
  // left out, so that whatever else overlaps it overlaps the output.
  for (const OutputOverInput& pair : may_coincide) {
    auto find = [&](bool output, int index) {
      return std::find_if(spans.begin(), spans.end(), [&](const TensorSpan& s) {
        return s.output == output && s.index == index;
      });
    };
    auto out = find(true, pair.output);
    auto in = find(false, pair.input);
    if (out == spans.end() || in == spans.end()) continue;
    if (std::tie(out->device, out->inode, out->start, out->end) ==
        std::tie(in->device, in->inode, in->start, in->end)) {
      in->end = in->start;  // empty: overlaps nothing
    }
  }
  std::sort(spans.begin(), spans.end(), [](const TensorSpan& a, const TensorSpan& b) {
    return std::tie(a.device, a.inode, a.start) < std::tie(b.device, b.inode, b.start);
  });
  // Sweeping each object's spans by start: a span overlaps an earlier one
  // exactly when it starts before that one's end. Of the earlier spans, the
  // input and the output reaching furthest are the only ones to compare.
  const TensorSpan* input = nullptr;   // furthest-reaching earlier input
  const TensorSpan* output = nullptr;  // furthest-reaching earlier output
  for (size_t i = 0; i < spans.size(); ++i) {
    const TensorSpan& s = spans[i];
    if (s.start == s.end) continue;
    // A new object (compared with the last span that counted: an empty one
    // between two objects says nothing).
    const TensorSpan* last = output != nullptr ? output : input;
    if (last != nullptr && (s.device != last->device || s.inode != last->inode)) {
      input = output = nullptr;
    }
    const TensorSpan* hit = nullptr;
    if (output != nullptr && s.start < output->end) {
      hit = output;
    } else if (s.output && input != nullptr && s.start < input->end) {
      hit = input;
    }
    if (hit != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          Name(s.output ? s : *hit), " shares memory with ", Name(s.output ? *hit : s),
          ": outputs may not overlap inputs or other outputs"));
    }
    const TensorSpan*& furthest = s.output ? output : input;
    if (furthest == nullptr || s.end > furthest->end) furthest = &s;
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
