// The bytes of one constant as the runtime holds them: shared ownership, so
// a compiled graph, the table of shared constants (shared_constants.h) and
// persistence (constant_persistence.h) can all keep the same bytes alive.
// Its own header because kernels and passes, below the compiler, hold them.
#pragma once

#include <cstdint>
#include <memory>

namespace kiln::runtime {

// Bytes of one constant, owned by whoever resolved it (the constant store);
// the compiled graph keeps it alive.
struct ConstantData {
  std::shared_ptr<const uint8_t> bytes;
  int64_t size = 0;
};

}  // namespace kiln::runtime
