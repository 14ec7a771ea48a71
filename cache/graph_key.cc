#include "cache/graph_key.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "cache/compiler_version.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/sha256.h"

namespace kiln::cache {

std::string CanonicalGraphBytes(const kiln::v1::Graph& graph) {
  kiln::v1::Graph canonical = graph;
  for (auto& node : *canonical.mutable_nodes()) node.clear_name();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    canonical.SerializeToCodedStream(&coded);
  }
  return bytes;
}

std::string GraphKey(const kiln::v1::Graph& graph,
                     const std::map<std::string, std::string>& options) {
  // Length-prefixed fields so no two different inputs concatenate alike.
  std::string material;
  auto add = [&material](const std::string& s) {
    material += std::to_string(s.size());
    material += ':';
    material += s;
  };
  add("kiln-graph-key-v1");
  add(CompilerVersion());
  add(runtime::CpuFeatureString());
  for (const auto& [k, v] : options) {
    add(k);
    add(v);
  }
  add(CanonicalGraphBytes(graph));
  return runtime::Sha256Hex(material);
}

}  // namespace kiln::cache
