// Parsing and printing of CompileOptions (see compile_options.h).
#include "runtime/ir/compile_options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/util/cpu_features.h"

namespace kiln::runtime {
namespace {

constexpr const char* kValidKeys = "num_threads, hint, precision, layout, branches";

absl::Status BadValue(const std::string& key, const std::string& value,
                      const std::string& valid) {
  return absl::InvalidArgumentError(absl::StrCat("compile option ", key, "='", value,
                                                 "' is invalid; valid values: ", valid));
}

const char* LayoutName(LayoutOption layout) {
  switch (layout) {
    case LayoutOption::kAuto: return "auto";
    case LayoutOption::kNchw: return "nchw";
    case LayoutOption::kNhwc: return "nhwc";
    case LayoutOption::kBlocked: return "blocked";
  }
  return "auto";
}

}  // namespace

absl::StatusOr<CompileOptions> ParseCompileOptions(
    const std::map<std::string, std::string>& options) {
  CompileOptions parsed;
  for (const auto& [key, value] : options) {
    if (key == "num_threads") {
      int n = 0;
      if (!absl::SimpleAtoi(value, &n) || n < 1 || n > kMaxNumThreads) {
        return BadValue(key, value, absl::StrCat("an integer from 1 to ", kMaxNumThreads));
      }
      parsed.num_threads = n;
    } else if (key == "hint") {
      if (value == "latency") {
        parsed.hint = ExecutionHint::kLatency;
      } else if (value == "throughput") {
        parsed.hint = ExecutionHint::kThroughput;
      } else {
        return BadValue(key, value, "latency, throughput");
      }
    } else if (key == "precision") {
      if (value == "f32") {
        parsed.precision = Precision::kF32;
      } else if (value == "bf16") {
        parsed.precision = Precision::kBf16;
      } else if (value == "auto") {
        parsed.precision = NativeBf16() ? Precision::kBf16 : Precision::kF32;
        parsed.precision_auto = true;
      } else {
        return BadValue(key, value, "f32, bf16, auto");
      }
    } else if (key == "layout") {
      if (value == "auto") {
        parsed.layout = LayoutOption::kAuto;
      } else if (value == "nchw") {
        parsed.layout = LayoutOption::kNchw;
      } else if (value == "nhwc") {
        parsed.layout = LayoutOption::kNhwc;
      } else if (value == "blocked") {
        parsed.layout = LayoutOption::kBlocked;
      } else {
        return BadValue(key, value, "auto, nchw, nhwc, blocked");
      }
    } else if (key == "branches") {
      if (value == "off") {
        parsed.branches = BranchMode::kOff;
      } else if (value == "auto") {
        parsed.branches = BranchMode::kAuto;
      } else if (value == "on") {
        parsed.branches = BranchMode::kOn;
      } else {
        return BadValue(key, value, "off, auto, on");
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown compile option '", key, "'; valid options: ", kValidKeys));
    }
  }
  return parsed;
}

bool NativeBf16() {
  static const bool native = [] {
    for (const std::string& f : CpuFeatures()) {
      if (f == "avx512_bf16" || f == "amx_bf16") return true;
    }
    return false;
  }();
  return native;
}

std::string BranchModeName(BranchMode mode) {
  switch (mode) {
    case BranchMode::kOff: return "off";
    case BranchMode::kAuto: return "auto";
    case BranchMode::kOn: return "on";
  }
  return "?";
}

std::string CompileOptionsString(const CompileOptions& options) {
  return absl::StrCat(
      "num_threads=",
      options.num_threads == 0 ? std::string("default") : absl::StrCat(options.num_threads),
      " hint=", options.hint == ExecutionHint::kLatency ? "latency" : "throughput",
      " precision=", options.precision == Precision::kF32 ? "f32" : "bf16",
      options.precision_auto
          ? (options.precision == Precision::kBf16 ? " (auto)" : " (auto: no native bf16)")
          : "",
      " layout=", LayoutName(options.layout),
      " branches=", BranchModeName(options.branches));
}

}  // namespace kiln::runtime
