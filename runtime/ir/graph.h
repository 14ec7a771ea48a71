// The runtime's graph IR: an ATen-level graph in topological order, decoded
// from kiln.v1.Graph (see ir/from_proto.h). Nodes reference earlier nodes'
// outputs by (node, output) index; literals are kept as typed Args so each
// op's prepare function can read them by position or by name.
//
// A Graph is a plain value: not thread-safe to mutate, safe to read from
// several threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "runtime/ir/compile_options.h"
#include "runtime/ir/tensor_meta.h"

namespace kiln::runtime {

struct ValueRef {
  int node = -1;
  int output = 0;
  bool operator==(const ValueRef& o) const {
    return node == o.node && output == o.output;
  }
};

// One argument of an op call: a tensor reference or a literal.
struct Arg {
  enum class Kind {
    kNone,
    kTensor,
    kInt,
    kFloat,
    kBool,
    kString,
    kList,
    kDType,
    kDevice,
    kMemoryFormat,
  };
  Kind kind = Kind::kNone;
  ValueRef tensor;        // kTensor
  int64_t i = 0;          // kInt, kDType (wire value), kMemoryFormat
  double f = 0.0;         // kFloat
  bool b = false;         // kBool
  std::string s;          // kString, kDevice
  std::vector<Arg> list;  // kList
};

struct NamedArg {
  std::string name;
  Arg value;
};

struct Node {
  enum class Kind { kInput, kConstant, kOp };
  Kind kind = Kind::kOp;
  std::string name;  // for messages only

  // kInput: position among the graph's inputs.
  int input_index = -1;
  // kConstant: content hash in the constant store.
  std::string constant_hash;
  // kConstant: what its bytes are, independent of where they live: "h:"
  // and the store hash, or a key for how the compiler derived them from
  // other constants (compile/shared_constants.h). Derived forms (folds,
  // packed weights) are shared between compiled graphs by it; empty: not
  // shared.
  std::string share_key;
  // kOp: the ATen overload and its registry index.
  std::string target;
  int op_index = -1;
  std::vector<Arg> args;
  std::vector<NamedArg> kwargs;

  // Output metas: given for inputs and constants, inferred for ops.
  std::vector<TensorMeta> outputs;

  // Set by compile passes on nodes folded or fused away; dead nodes are
  // skipped by every later stage.
  bool dead = false;
};

// Output `output` may lie exactly over input `input` (kiln.proto's
// OutputOverInput): the run then reads every byte of that input before it
// writes the output's (compile/compiler.cc).
struct OutputOverInput {
  int output = 0;
  int input = 0;
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<ValueRef> outputs;
  int num_inputs = 0;
  std::vector<OutputOverInput> outputs_over_inputs;
  // From the compile request (not the wire graph): how to compile and run
  // this graph. Set before Compile(); read by prepare functions (through
  // NodeArgs), passes and the executor.
  CompileOptions options;

  const TensorMeta& MetaOf(ValueRef v) const {
    return nodes[v.node].outputs[v.output];
  }
};

// OK when every pair names an existing output and input, no output or
// input is named twice, and (where the output's meta is known: an op's is
// once shapes are inferred) the two metas agree in dtype and shape;
// INVALID_ARGUMENT saying which otherwise. `what` prefixes the message
// ("graph", "optimized graph").
absl::Status CheckOutputsOverInputs(const Graph& graph, const std::string& what);

// The placeholder node of input `index`, or -1.
int InputNode(const Graph& graph, int index);

// Appends every tensor reference inside `arg` (depth first) to `out`.
void CollectTensorRefs(const Arg& arg, std::vector<ValueRef>* out);
// Tensor references of all args then kwargs of `node`, in order: the order
// in which a kernel receives its inputs.
std::vector<ValueRef> TensorInputsOf(const Node& node);

// Appends `arg` to `out` exactly (floats by their bits, lists bracketed,
// each argument followed by ','), for keys equal exactly when the
// arguments are; `tensor` spells each tensor reference, false to give up
// (then so does this).
bool AppendArgKey(const Arg& arg, std::string* out,
                  absl::FunctionRef<bool(ValueRef, std::string*)> tensor);

}  // namespace kiln::runtime
