// libFuzzer target: a kiln.v1.Graph as it arrives in a CompileRequest,
// decoded, validated, compiled and (when small) run, as the daemon does.
// Any input must end in an error status or a finished run: never a crash,
// a hang, an out-of-bounds access or undefined behaviour.
//
// Constants the graph names are resolved to zero-filled bytes of the size
// its own constant node declares (so two nodes naming one hash with
// different metas reach the compiler's size check).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "kiln/v1/kiln.pb.h"
#include "runtime/compile/compiler.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"

namespace {

constexpr int64_t kMaxConstantBytes = 1 << 20;
constexpr int64_t kMaxRunBytes = 16 << 20;

}  // namespace

// Invalid UTF-8 in string fields is a parse failure the fuzzer hits all
// the time; protobuf would log each one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::runtime;
  kiln::v1::Graph proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  std::map<std::string, ConstantData> constants;
  for (const auto& node : proto.nodes()) {
    if (!node.has_constant()) continue;
    auto meta = MetaFromProto(node.constant().meta());
    if (!meta.ok() || meta->ByteSize() > kMaxConstantBytes) continue;
    const int64_t bytes = meta->ByteSize();
    std::shared_ptr<uint8_t> buffer(new uint8_t[bytes > 0 ? bytes : 1](),
                                    std::default_delete<uint8_t[]>());
    constants.emplace(node.constant().hash(), ConstantData{buffer, bytes});
  }
  auto graph = GraphFromProto(proto);
  if (!graph.ok()) return 0;
  ConstantResolver resolve = [&](const std::string& hash) -> absl::StatusOr<ConstantData> {
    auto it = constants.find(hash);
    if (it == constants.end()) return absl::NotFoundError("no such constant");
    return it->second;
  };
  CompileLimits limits;
  limits.max_arena_bytes = 64 << 20;
  auto compiled = Compile(*std::move(graph), resolve, limits);
  if (!compiled.ok()) return 0;
  const CompiledGraph& g = **compiled;
  int64_t total = g.TotalArenaBytes();
  for (const auto& m : g.input_metas) total += m.ByteSize();
  for (const auto& m : g.output_metas) total += m.ByteSize();
  if (total > kMaxRunBytes) return 0;
  std::vector<std::vector<uint8_t>> in(g.input_metas.size()), out(g.output_metas.size());
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].assign(static_cast<size_t>(g.input_metas[i].ByteSize()) + 1, 0);
    in_ptrs.push_back(in[i].data());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].assign(static_cast<size_t>(g.output_metas[i].ByteSize()) + 1, 0);
    out_ptrs.push_back(out[i].data());
  }
  (void)Execute(g, in_ptrs, out_ptrs);
  return 0;
}
