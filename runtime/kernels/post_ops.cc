#include "runtime/kernels/post_ops.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::runtime {

absl::StatusOr<PostOp> ParsePostOp(const std::string& text) {
  using alg = dnnl::algorithm;
  PostOp op;
  op.text = text;
  if (text == "add") {
    op.kind = PostOp::Kind::kAdd;
    op.algorithm = alg::binary_add;
    return op;
  }
  if (text == "relu") {
    op.algorithm = alg::eltwise_relu;
  } else if (text == "sigmoid") {
    op.algorithm = alg::eltwise_logistic;
  } else if (text == "silu") {
    op.algorithm = alg::eltwise_swish;
    op.alpha = 1.f;
  } else if (text == "hardswish") {
    op.algorithm = alg::eltwise_hardswish;
    op.alpha = 1.f / 6.f;
    op.beta = 0.5f;
  } else if (text == "hardsigmoid") {
    op.algorithm = alg::eltwise_hardsigmoid;
    op.alpha = 1.f / 6.f;
    op.beta = 0.5f;
  } else if (text == "gelu_erf") {
    op.algorithm = alg::eltwise_gelu_erf;
  } else if (text == "gelu_tanh") {
    op.algorithm = alg::eltwise_gelu_tanh;
  } else if (text.rfind("clip:", 0) == 0) {
    std::vector<std::string> parts = absl::StrSplit(text, ':');
    double lo = 0, hi = 0;
    if (parts.size() != 3 || !absl::SimpleAtod(parts[1], &lo) ||
        !absl::SimpleAtod(parts[2], &hi) || !(lo <= hi)) {
      return absl::InvalidArgumentError(absl::StrCat("bad post-op '", text, "'"));
    }
    op.algorithm = alg::eltwise_clip_v2;
    op.alpha = static_cast<float>(lo);
    op.beta = static_cast<float>(hi);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown post-op '", text, "'"));
  }
  return op;
}

absl::StatusOr<std::vector<PostOp>> ParsePostOps(const NodeArgs& args, int pos,
                                                 const char* name) {
  std::vector<PostOp> ops;
  const Arg* list = args.Find(pos, name);
  if (list == nullptr) return ops;
  if (list->kind != Arg::Kind::kList) return args.Error("post_ops must be a list of strings");
  for (const Arg& item : list->list) {
    if (item.kind != Arg::Kind::kString) return args.Error("post_ops must be a list of strings");
    auto op = ParsePostOp(item.s);
    if (!op.ok()) return args.Error(std::string(op.status().message()));
    ops.push_back(*op);
  }
  return ops;
}

dnnl::post_ops ToDnnlPostOps(const std::vector<PostOp>& ops) {
  dnnl::post_ops po;
  for (const PostOp& op : ops) {
    if (op.kind == PostOp::Kind::kAdd) {
      po.append_sum(1.f);
    } else {
      po.append_eltwise(op.algorithm, op.alpha, op.beta);
    }
  }
  return po;
}

namespace {

bool LiteralNumber(const Node& node, int pos, double* out) {
  if (pos >= static_cast<int>(node.args.size())) return false;
  const Arg& a = node.args[pos];
  if (a.kind == Arg::Kind::kFloat) {
    *out = a.f;
    return true;
  }
  if (a.kind == Arg::Kind::kInt) {
    *out = static_cast<double>(a.i);
    return true;
  }
  return false;
}

}  // namespace

std::string ActivationPostOp(const Node& node) {
  const std::string& t = node.target;
  if (!node.kwargs.empty() && t != "aten.gelu.default") return "";
  if (t == "aten.relu.default" && node.args.size() == 1) return "relu";
  if (t == "aten.sigmoid.default" && node.args.size() == 1) return "sigmoid";
  if (t == "aten.silu.default" && node.args.size() == 1) return "silu";
  if (t == "aten.hardswish.default" && node.args.size() == 1) return "hardswish";
  if (t == "aten.hardsigmoid.default" && node.args.size() == 1) return "hardsigmoid";
  if (t == "aten.gelu.default") {
    std::string approximate = "none";
    for (const NamedArg& kw : node.kwargs) {
      if (kw.name != "approximate" || kw.value.kind != Arg::Kind::kString) return "";
      approximate = kw.value.s;
    }
    if (node.args.size() == 2 && node.args[1].kind == Arg::Kind::kString) {
      approximate = node.args[1].s;
    } else if (node.args.size() != 1) {
      return "";
    }
    if (approximate == "none") return "gelu_erf";
    if (approximate == "tanh") return "gelu_tanh";
    return "";
  }
  if (t == "aten.hardtanh.default" || t == "aten.clamp.default") {
    double lo = t == "aten.hardtanh.default" ? -1.0 : -INFINITY;
    double hi = t == "aten.hardtanh.default" ? 1.0 : INFINITY;
    if (node.args.size() > 1 && !LiteralNumber(node, 1, &lo)) return "";
    if (node.args.size() > 2 && !LiteralNumber(node, 2, &hi)) return "";
    if (node.args.size() > 3 || !std::isfinite(lo) || !std::isfinite(hi)) return "";
    return absl::StrCat("clip:", lo, ":", hi);
  }
  return "";
}

}  // namespace kiln::runtime
