// Walks every op of the schema (runtime/ops/ops.def): each one needs a
// kernel, a kernel test that checks it against a reference, and what
// clients learn of it (capabilities, docs/ops.md) in step with its entry.
// Adding an op without them fails here, naming the op.
#include "runtime/ops/registry.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

namespace fs = std::filesystem;

// The checkout this test was built from: the sources are read, not copied
// into the build, so a test or doc added later is seen.
fs::path SourceRoot() {
  fs::path p = fs::path(__FILE__);
  for (int i = 0; i < 4; ++i) p = p.parent_path();  // tests/runtime/ops/<file>
  return p;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct SourceFile {
  std::string name;
  std::string text;
};

std::vector<SourceFile> KernelTests() {
  std::vector<SourceFile> files;
  for (const auto& e : fs::directory_iterator(SourceRoot() / "tests/runtime/kernels")) {
    if (e.path().extension() != ".cc") continue;
    files.push_back({e.path().filename().string(), ReadFile(e.path())});
  }
  return files;
}

bool Names(const SourceFile& f, const char* target) {
  return f.text.find(absl::StrCat("\"", target, "\"")) != std::string::npos;
}

// The public op whose layout form `form` is, or null.
const OpDef* LayoutFormOf(const OpDef& form) {
  for (const OpDef& op : AllOps()) {
    if (op.traits.layout_form != nullptr && std::string_view(op.traits.layout_form) == form.target) {
      return &op;
    }
  }
  return nullptr;
}

TEST(OpSchema, EveryOpHasAKernelAndTypes) {
  ASSERT_EQ(AllOps().size(), static_cast<size_t>(kNumOps));
  for (const OpDef& op : AllOps()) {
    EXPECT_NE(op.prepare, nullptr) << op.target;
    EXPECT_NE(op.dtypes, 0u) << op.target << " accepts no element type";
    EXPECT_EQ(FindOp(op.target), &op - AllOps().data()) << op.target;
  }
}

// A kernel test names the op and compares its output with a reference the
// test computes itself (AllClose, kernel_test_util.h). The layout form of
// an op (kiln.*_nhwc) may instead be compared with that op in one file:
// the op's own test checks it against a reference.
TEST(OpSchema, EveryOpHasAKernelTestWithAReference) {
  const std::vector<SourceFile> tests = KernelTests();
  ASSERT_FALSE(tests.empty()) << "no kernel tests under " << SourceRoot();
  for (const OpDef& op : AllOps()) {
    std::vector<std::string> with_reference, naming;
    const OpDef* plain = LayoutFormOf(op);
    for (const SourceFile& f : tests) {
      if (!Names(f, op.target)) continue;
      naming.push_back(f.name);
      if (f.text.find("AllClose(") != std::string::npos ||
          (plain != nullptr && Names(f, plain->target))) {
        with_reference.push_back(f.name);
      }
    }
    EXPECT_FALSE(with_reference.empty())
        << op.target << " has no test under tests/runtime/kernels/ that runs it and checks it "
        << "against a reference (AllClose)"
        << (naming.empty() ? "" : absl::StrCat("; named in ", absl::StrJoin(naming, ", ")));
  }
}

TEST(OpSchema, TraitNamesFollowTheFlags) {
  for (const OpDef& op : AllOps()) {
    const std::vector<std::string_view> names = TraitNames(op.traits);
    int flags = 0;
    for (int bit = 0; bit < kNumTraitFlags; ++bit) flags += (op.traits.flags >> bit) & 1;
    EXPECT_EQ(names.size(), static_cast<size_t>(flags + (op.traits.IsPostOp() ? 1 : 0)))
        << op.target;
  }
  const OpDef& relu = AllOps()[FindOp("aten.relu.default")];
  EXPECT_EQ(TraitNames(relu.traits),
            (std::vector<std::string_view>{"elementwise", "post_op"}));
  const OpDef& view = AllOps()[FindOp("aten.view.default")];
  EXPECT_EQ(TraitNames(view.traits),
            (std::vector<std::string_view>{"alias", "view", "reshape"}));
}

// docs/ops.md as the schema gives it.
std::string OpsDoc() {
  std::string out =
      "# Ops\n\n"
      "Every op the daemon runs, from `runtime/ops/ops.def` (what each trait\n"
      "means: `runtime/ops/op_traits.h`; how to add an op:\n"
      "[adding-an-op.md](adding-an-op.md)). Generated: after changing the\n"
      "schema run `KILN_UPDATE_OPS_DOC=1 build/tests/kiln_runtime_ops_tests\n"
      "--gtest_filter=OpSchema.*`; `OpSchema.DocsListEveryOp` fails while this\n"
      "file is out of step.\n\n"
      "## ATen ops (offered to clients by `GetCapabilities`)\n\n"
      "| op | dtypes | traits |\n|---|---|---|\n";
  auto dtypes = [](DTypeMask mask) {
    std::vector<std::string> names;
    for (int d = 1; d <= static_cast<int>(kLastDType); ++d) {
      if (mask & DTypeBit(static_cast<DType>(d))) names.push_back(DTypeName(static_cast<DType>(d)));
    }
    return absl::StrJoin(names, ", ");
  };
  auto traits = [](const OpTraits& t) {
    std::vector<std::string> names;
    for (std::string_view n : TraitNames(t)) names.emplace_back(n);
    std::string s = absl::StrJoin(names, ", ");
    if (t.layout_form != nullptr) absl::StrAppend(&s, s.empty() ? "" : ", ", "layout form `", t.layout_form, "`");
    return s;
  };
  for (const OpDef& op : AllOps()) {
    if (op.internal) continue;
    absl::StrAppend(&out, "| `", op.target, "` | ", dtypes(op.dtypes), " | ", traits(op.traits),
                    " |\n");
  }
  absl::StrAppend(&out,
                  "\n## Kiln's fused ops (made by compile passes, never offered)\n\n"
                  "| op | dtypes | arguments | traits |\n|---|---|---|---|\n");
  for (const OpDef& op : AllOps()) {
    if (!op.internal) continue;
    absl::StrAppend(&out, "| `", op.target, "` | ", dtypes(op.dtypes), " | ", op.traits.args,
                    " | ", traits(op.traits), " |\n");
  }
  return out;
}

TEST(OpSchema, DocsListEveryOp) {
  const fs::path doc = SourceRoot() / "docs/ops.md";
  const std::string want = OpsDoc();
  if (const char* update = std::getenv("KILN_UPDATE_OPS_DOC"); update && std::string(update) == "1") {
    std::ofstream(doc) << want;
  }
  EXPECT_EQ(ReadFile(doc), want) << "docs/ops.md is out of step with runtime/ops/ops.def: "
                                 << "rerun with KILN_UPDATE_OPS_DOC=1";
}

}  // namespace
}  // namespace kiln::runtime
