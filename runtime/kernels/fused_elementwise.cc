// kiln.elementwise: a chain or tree of f32 elementwise ops fused by
// passes/fuse_elementwise.cc, run as one pass over the elements. The
// program (elementwise_program.h) is interpreted over blocks of kBlock
// elements: each instruction runs over the whole block, 8 lanes at a time,
// reading and writing block-sized local arrays that stay in L1, so
// intermediates never become tensors and the per-instruction dispatch is
// paid once per block. Inputs are the output's shape or hold one element
// (broadcast as a scalar).
//
// Each op computes exactly what the unfused kernel does (transcendentals
// through vector_math.h, clamps with std::min/std::max's handling of NaN
// and signed zeros), so fusing changes results by at most the rounding of
// an a*b+c the compiler may or may not have contracted there.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/broadcast.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/vector_math.h"
#include "runtime/ops/elementwise_program.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Elements per block: 32 vectors, so that the per-instruction dispatch is
// small next to the work, and a block's few live arrays (1 KB each) stay
// in L1.
constexpr int kBlock = 256;
constexpr int kLanes = 8;

struct Lanes;
struct Step;
// Runs one instruction over one block, writing dst[0, kBlock).
using BlockFn = void (*)(const Step& s, const Lanes* x, float* dst);

// One instruction with its operands bound to where they live in a block.
struct Step {
  EwOp op;
  BlockFn fn = nullptr;
  int arity = 0;
  int dst = 0;  // slot
  struct Source {
    enum class Kind : uint8_t { kInput, kSlot, kLiteral } kind = Kind::kLiteral;
    int index = 0;  // input or slot
    float value = 0.f;
  };
  std::array<Source, 3> src;
};

// An operand inside one block: 8 lanes at a time from an array, or a
// broadcast value when p is null.
struct Lanes {
  const float* p = nullptr;
  __m256 v;
  __m256 Get(int i) const { return p != nullptr ? _mm256_loadu_ps(p + i) : v; }
};

using vmath::Relu6OfPlus3;
using vmath::StdMax;
using vmath::StdMin;

// The loops over one block, one per combination of array and broadcast
// operands so that each is a plain loop; an op on broadcasts alone is
// computed once.
template <typename F>
inline void Unary(float* dst, const Lanes& a, F f) {
  if (a.p != nullptr) {
    for (int i = 0; i < kBlock; i += kLanes) _mm256_storeu_ps(dst + i, f(_mm256_loadu_ps(a.p + i)));
  } else {
    const __m256 r = f(a.v);
    for (int i = 0; i < kBlock; i += kLanes) _mm256_storeu_ps(dst + i, r);
  }
}
template <typename F>
inline void Binary(float* dst, const Lanes& a, const Lanes& b, F f) {
  if (a.p != nullptr && b.p != nullptr) {
    for (int i = 0; i < kBlock; i += kLanes) {
      _mm256_storeu_ps(dst + i, f(_mm256_loadu_ps(a.p + i), _mm256_loadu_ps(b.p + i)));
    }
  } else if (a.p != nullptr) {
    const __m256 bv = b.v;
    for (int i = 0; i < kBlock; i += kLanes) {
      _mm256_storeu_ps(dst + i, f(_mm256_loadu_ps(a.p + i), bv));
    }
  } else if (b.p != nullptr) {
    const __m256 av = a.v;
    for (int i = 0; i < kBlock; i += kLanes) {
      _mm256_storeu_ps(dst + i, f(av, _mm256_loadu_ps(b.p + i)));
    }
  } else {
    const __m256 r = f(a.v, b.v);
    for (int i = 0; i < kBlock; i += kLanes) _mm256_storeu_ps(dst + i, r);
  }
}

// One function per op, so each loop is compiled (and its registers
// allocated) on its own.
#define KILN_EW_UNARY(name, expr)                                                     \
  void name(const Step& s, const Lanes* x, float* dst) {                              \
    Unary(dst, x[0], [&](__m256 p) { return expr; });                                 \
  }
#define KILN_EW_BINARY(name, expr)                                                    \
  void name(const Step& s, const Lanes* x, float* dst) {                              \
    Binary(dst, x[0], x[1], [](__m256 p, __m256 q) { return expr; });                 \
  }

KILN_EW_BINARY(AddBlock, _mm256_add_ps(p, q))
KILN_EW_BINARY(SubBlock, _mm256_sub_ps(p, q))
KILN_EW_BINARY(MulBlock, _mm256_mul_ps(p, q))
KILN_EW_BINARY(DivBlock, _mm256_div_ps(p, q))
KILN_EW_UNARY(NegBlock, _mm256_xor_ps(p, _mm256_set1_ps(-0.f)))
KILN_EW_UNARY(ReluBlock, StdMax(p, _mm256_setzero_ps()))
KILN_EW_UNARY(SqrtBlock, _mm256_sqrt_ps(p))
KILN_EW_UNARY(RsqrtBlock, _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_sqrt_ps(p)))
KILN_EW_UNARY(ExpBlock, vmath::Exp(p))
KILN_EW_UNARY(TanhBlock, vmath::Tanh(p))
KILN_EW_UNARY(SigmoidBlock, vmath::Sigmoid(p))
KILN_EW_UNARY(SiluBlock, vmath::Silu(p))
KILN_EW_UNARY(GeluErfBlock, vmath::GeluErf(p))
KILN_EW_UNARY(GeluTanhBlock, vmath::GeluTanh(p))
// x * min(max(x + 3, 0), 6) / 6, in that order, as activations.cc has it.
KILN_EW_UNARY(HardswishBlock, _mm256_div_ps(_mm256_mul_ps(p, Relu6OfPlus3(p)), _mm256_set1_ps(6.f)))
KILN_EW_UNARY(HardsigmoidBlock, _mm256_div_ps(Relu6OfPlus3(p), _mm256_set1_ps(6.f)))
KILN_EW_UNARY(ClampBlock, StdMin(StdMax(p, _mm256_set1_ps(s.src[1].value)),
                                 _mm256_set1_ps(s.src[2].value)))
#undef KILN_EW_UNARY
#undef KILN_EW_BINARY

void FmaBlock(const Step& s, const Lanes* x, float* dst) {
  for (int i = 0; i < kBlock; i += kLanes) {
    _mm256_storeu_ps(dst + i, _mm256_fmadd_ps(x[0].Get(i), x[1].Get(i), x[2].Get(i)));
  }
}

BlockFn BlockFnOf(EwOp op) {
  switch (op) {
    case EwOp::kAdd: return AddBlock;
    case EwOp::kSub: return SubBlock;
    case EwOp::kMul: return MulBlock;
    case EwOp::kDiv: return DivBlock;
    case EwOp::kFma: return FmaBlock;
    case EwOp::kNeg: return NegBlock;
    case EwOp::kRelu: return ReluBlock;
    case EwOp::kSqrt: return SqrtBlock;
    case EwOp::kRsqrt: return RsqrtBlock;
    case EwOp::kExp: return ExpBlock;
    case EwOp::kTanh: return TanhBlock;
    case EwOp::kSigmoid: return SigmoidBlock;
    case EwOp::kSilu: return SiluBlock;
    case EwOp::kGeluErf: return GeluErfBlock;
    case EwOp::kGeluTanh: return GeluTanhBlock;
    case EwOp::kHardswish: return HardswishBlock;
    case EwOp::kHardsigmoid: return HardsigmoidBlock;
    case EwOp::kClamp: return ClampBlock;
  }
  return nullptr;
}

class FusedElementwiseKernel final : public Kernel {
 public:
  FusedElementwiseKernel(std::vector<Step> steps, std::vector<bool> scalar_input, int64_t n)
      : steps_(std::move(steps)), scalar_input_(std::move(scalar_input)), n_(n) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const int num_inputs = static_cast<int>(scalar_input_.size());
    std::array<const float*, kMaxEwInputs> in{};
    for (int k = 0; k < num_inputs; ++k) in[k] = ctx.inputs[k].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const int64_t blocks = (n_ + kBlock - 1) / kBlock;
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 15) / (kBlock * static_cast<int64_t>(steps_.size())));
    ParallelFor(blocks, grain, [&](int64_t begin, int64_t end) {
      alignas(64) float slots[kMaxEwSlots][kBlock];
      alignas(64) float padded[kMaxEwInputs][kBlock];
      std::array<Lanes, kMaxEwInputs> inputs;
      for (int k = 0; k < num_inputs; ++k) {
        if (scalar_input_[k]) inputs[k].v = _mm256_set1_ps(in[k][0]);
      }
      for (int64_t blk = begin; blk < end; ++blk) {
        const int64_t base = blk * kBlock;
        const int64_t len = std::min<int64_t>(kBlock, n_ - base);
        const bool full = len == kBlock;
        for (int k = 0; k < num_inputs; ++k) {
          if (scalar_input_[k]) continue;
          if (full) {
            inputs[k].p = in[k] + base;
          } else {
            // The last, partial block runs on a zero-padded copy so that
            // every element goes through the same full-width code.
            std::memcpy(padded[k], in[k] + base, len * sizeof(float));
            std::fill(padded[k] + len, padded[k] + kBlock, 0.f);
            inputs[k].p = padded[k];
          }
        }
        for (size_t i = 0; i < steps_.size(); ++i) {
          const Step& s = steps_[i];
          Lanes x[3];
          for (int j = 0; j < s.arity; ++j) {
            const Step::Source& src = s.src[j];
            switch (src.kind) {
              case Step::Source::Kind::kInput:
                x[j] = inputs[src.index];
                break;
              case Step::Source::Kind::kSlot:
                x[j].p = slots[src.index];
                break;
              case Step::Source::Kind::kLiteral:
                x[j].v = _mm256_set1_ps(src.value);
                break;
            }
          }
          const bool last = i + 1 == steps_.size();
          s.fn(s, x, last && full ? out + base : slots[s.dst]);
        }
        if (!full) std::memcpy(out + base, slots[steps_.back().dst], len * sizeof(float));
      }
    });
    return absl::OkStatus();
  }

 private:
  std::vector<Step> steps_;
  std::vector<bool> scalar_input_;
  int64_t n_;
};

// The program with operands bound to inputs, slots and literals.
std::vector<Step> BindSteps(const std::vector<EwInstr>& program, const std::vector<int>& slot) {
  std::vector<Step> steps;
  for (size_t i = 0; i < program.size(); ++i) {
    Step s;
    s.op = program[i].op;
    s.fn = BlockFnOf(s.op);
    s.arity = EwArity(s.op);
    s.dst = slot[i];
    for (size_t j = 0; j < program[i].operands.size(); ++j) {
      const EwOperand& o = program[i].operands[j];
      switch (o.kind) {
        case EwOperand::Kind::kInput:
          s.src[j] = {Step::Source::Kind::kInput, o.index, 0.f};
          break;
        case EwOperand::Kind::kTemp:
          s.src[j] = {Step::Source::Kind::kSlot, slot[o.index], 0.f};
          break;
        case EwOperand::Kind::kLiteral:
          s.src[j] = {Step::Source::Kind::kLiteral, 0, o.value};
          break;
      }
    }
    steps.push_back(s);
  }
  return steps;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareFusedElementwise(const NodeArgs& args) {
  // (x0, ..., x<k-1>, program)
  const Node& node = args.node();
  const int num_inputs = static_cast<int>(node.args.size()) - 1;
  if (num_inputs < 1 || num_inputs > kMaxEwInputs || !node.kwargs.empty()) {
    return args.Error(absl::StrCat("expects 1 to ", kMaxEwInputs,
                                   " tensor inputs followed by a program"));
  }
  // Inputs are the output's shape or single elements, so the output's
  // shape is their broadcast.
  std::vector<TensorMeta> metas;
  std::vector<int64_t> shape;
  for (int k = 0; k < num_inputs; ++k) {
    const std::string name = absl::StrCat("x", k);
    KILN_ASSIGN_OR_RETURN(TensorMeta m, args.Tensor(k, name.c_str()));
    KILN_RETURN_IF_ERROR(RequireDType(args, m, name.c_str()));
    std::optional<std::vector<int64_t>> s = BroadcastShapes(shape, m.shape);
    if (!s) return args.Error(absl::StrCat("input x", k, " ", m.ToString(), " does not broadcast"));
    shape = *std::move(s);
    metas.push_back(std::move(m));
  }
  std::vector<bool> scalar_input;
  for (int k = 0; k < num_inputs; ++k) {
    const bool scalar = metas[k].NumElements() == 1;
    if (!scalar && metas[k].shape != shape) {
      return args.Error(absl::StrCat("input x", k, " ", metas[k].ToString(),
                                     " is neither the output's shape ", ShapeString(shape),
                                     " nor a single element"));
    }
    scalar_input.push_back(scalar);
  }
  const Arg& program_arg = node.args.back();
  if (program_arg.kind != Arg::Kind::kList || program_arg.list.empty() ||
      static_cast<int>(program_arg.list.size()) > kMaxEwInstructions) {
    return args.Error(absl::StrCat("program must be a list of 1 to ", kMaxEwInstructions,
                                   " instructions"));
  }
  std::vector<EwInstr> program;
  for (const Arg& item : program_arg.list) {
    if (item.kind != Arg::Kind::kString) return args.Error("program items must be strings");
    auto instr = ParseEwInstr(item.s, num_inputs, static_cast<int>(program.size()));
    if (!instr.ok()) return args.Error(std::string(instr.status().message()));
    program.push_back(*std::move(instr));
  }
  int num_slots = 0;
  const std::vector<int> slot = EwAssignSlots(program, &num_slots);
  if (num_slots > kMaxEwSlots) {
    return args.Error(absl::StrCat("program keeps ", num_slots,
                                   " results alive at once; the limit is ", kMaxEwSlots));
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  op.kernel = std::make_unique<FusedElementwiseKernel>(
      BindSteps(program, slot), std::move(scalar_input), op.outputs[0].NumElements());
  return op;
}

}  // namespace kiln::runtime
