// The op schema (ops/ops.def) as a constexpr table: what an op is, read at
// compile time. Kernels find their fused ops' argument positions here
// (KILN_ARG); lookups at run time (FindOp, OpOf, HasTrait) are the op
// table's, ops/registry.h, a layer above the kernels.
//
// Naming each op's prepare function takes only its declaration
// (ops/prepare_fns.h), so this header sits below the kernels that define
// them.
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "runtime/ops/elementwise_forms.h"
#include "runtime/ops/op_def.h"
#include "runtime/ops/prepare_fns.h"

namespace kiln::runtime {

inline constexpr OpDef kOps[] = {
#define KILN_OP(target, dtypes, fn, traits) OpDef{target, dtypes, &fn, false, traits},
#define KILN_INTERNAL_OP(target, dtypes, fn, traits) OpDef{target, dtypes, &fn, true, traits},
#include "runtime/ops/ops.def"
#undef KILN_INTERNAL_OP
#undef KILN_OP
};
inline constexpr int kNumOps = static_cast<int>(std::size(kOps));

constexpr int OpIndexOf(std::string_view target) {
  for (int i = 0; i < kNumOps; ++i) {
    if (target == kOps[i].target) return i;
  }
  return -1;
}

// Position of argument `name` of internal op `target`. Not found (or after
// a variadic argument, where positions vary) is an error when evaluated at
// compile time, as KILN_ARG does.
constexpr int ArgPosition(std::string_view target, std::string_view name) {
  const int op = OpIndexOf(target);
  if (op < 0 || kOps[op].traits.args == nullptr) throw "not an op with an argument schema";
  const std::string_view names = kOps[op].traits.args;
  for (int i = 0;; ++i) {
    const std::string_view arg = schema_internal::NthArg(names, i);
    if (arg.empty()) throw "no such argument";
    if (arg == name) return i;
    if (arg.size() >= 3 && arg.substr(arg.size() - 3) == "...") {
      throw "arguments after a variadic one have no fixed position";
    }
  }
}

}  // namespace kiln::runtime

// The ArgSlot of argument `name` of internal op `target`, both string
// literals; a name the op does not declare fails the build:
//   constexpr ArgSlot kResidual = KILN_ARG("kiln.conv2d", "residual");
#define KILN_ARG(target, name)                                                         \
  (::kiln::runtime::ArgSlot{                                                              \
      std::integral_constant<size_t, ::kiln::runtime::ArgPosition(target, name)>::value, \
      name})
