// Post-ops: parsing the strings fused ops carry, their oneDNN form, and
// which activation node becomes which (from the op schema).
#include "runtime/kernels/post_ops.h"


#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::runtime {

namespace {

// The activation post-ops with fixed parameters, by the name ops.def gives
// an op's post-op trait, and the oneDNN eltwise algorithm each runs as.
struct EltwisePostOp {
  const char* name;
  dnnl::algorithm algorithm;
  float alpha = 0.f;
  float beta = 0.f;
};
constexpr EltwisePostOp kEltwisePostOps[] = {
    {"relu", dnnl::algorithm::eltwise_relu},
    {"sigmoid", dnnl::algorithm::eltwise_logistic},
    {"silu", dnnl::algorithm::eltwise_swish, 1.f},
    {"hardswish", dnnl::algorithm::eltwise_hardswish, 1.f / 6.f, 0.5f},
    {"hardsigmoid", dnnl::algorithm::eltwise_hardsigmoid, 1.f / 6.f, 0.5f},
    {"gelu_erf", dnnl::algorithm::eltwise_gelu_erf},
    {"gelu_tanh", dnnl::algorithm::eltwise_gelu_tanh},
};

}  // namespace

absl::StatusOr<PostOp> ParsePostOp(const std::string& text) {
  PostOp op;
  op.text = text;
  if (text == "add") {
    op.kind = PostOp::Kind::kAdd;
    op.algorithm = dnnl::algorithm::binary_add;
    return op;
  }
  if (text == "channel_affine") {
    op.kind = PostOp::Kind::kChannelAffine;
    return op;
  }
  for (const EltwisePostOp& e : kEltwisePostOps) {
    if (text == e.name) {
      op.algorithm = e.algorithm;
      op.alpha = e.alpha;
      op.beta = e.beta;
      return op;
    }
  }
  if (text.rfind("leaky_relu:", 0) == 0) {
    double slope = 0;
    if (!absl::SimpleAtod(text.substr(11), &slope)) {
      return absl::InvalidArgumentError(absl::StrCat("bad post-op '", text, "'"));
    }
    op.algorithm = dnnl::algorithm::eltwise_relu;  // alpha: the negative slope
    op.alpha = static_cast<float>(slope);
    return op;
  }
  if (text.rfind("clip:", 0) == 0) {
    std::vector<std::string> parts = absl::StrSplit(text, ':');
    double lo = 0, hi = 0;
    if (parts.size() != 3 || !absl::SimpleAtod(parts[1], &lo) ||
        !absl::SimpleAtod(parts[2], &hi) || !(lo <= hi)) {
      return absl::InvalidArgumentError(absl::StrCat("bad post-op '", text, "'"));
    }
    op.algorithm = dnnl::algorithm::eltwise_clip_v2;
    op.alpha = static_cast<float>(lo);
    op.beta = static_cast<float>(hi);
    return op;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown post-op '", text, "'"));
}

absl::StatusOr<std::vector<PostOp>> ParsePostOps(const NodeArgs& args, int pos,
                                                 const char* name, bool channel_affine) {
  std::vector<PostOp> ops;
  const Arg* list = args.Find(pos, name);
  if (list == nullptr) return ops;
  if (list->kind != Arg::Kind::kList) return args.Error("post_ops must be a list of strings");
  for (const Arg& item : list->list) {
    if (item.kind != Arg::Kind::kString) return args.Error("post_ops must be a list of strings");
    auto op = ParsePostOp(item.s);
    if (!op.ok()) return args.Error(std::string(op.status().message()));
    if (op->kind == PostOp::Kind::kChannelAffine && !channel_affine) {
      return args.Error("this op takes no \"channel_affine\" post-op");
    }
    ops.push_back(*op);
  }
  return ops;
}

dnnl::memory::desc ChannelAffineDesc(int64_t channels) {
  return dnnl::memory::desc({1, channels, 1, 1}, dnnl::memory::data_type::f32,
                            dnnl::memory::format_tag::abcd);
}

dnnl::post_ops ToDnnlPostOps(const std::vector<PostOp>& ops, int64_t channels) {
  dnnl::post_ops po;
  for (const PostOp& op : ops) {
    switch (op.kind) {
      case PostOp::Kind::kAdd:
        po.append_sum(1.f);
        break;
      case PostOp::Kind::kChannelAffine:
        po.append_binary(dnnl::algorithm::binary_mul, ChannelAffineDesc(channels));
        po.append_binary(dnnl::algorithm::binary_add, ChannelAffineDesc(channels));
        break;
      case PostOp::Kind::kEltwise:
        po.append_eltwise(op.algorithm, op.alpha, op.beta);
        break;
    }
  }
  return po;
}

int DnnlChannelAffineIndex(const std::vector<PostOp>& ops) {
  int index = 0;
  for (const PostOp& op : ops) {
    if (op.kind == PostOp::Kind::kChannelAffine) return index;
    ++index;
  }
  return -1;
}

}  // namespace kiln::runtime
