#include "runtime/compile/constant_persistence.h"

namespace kiln::runtime {
namespace {
thread_local ConstantPersistence* current = nullptr;
}  // namespace

ConstantPersistence* CurrentPersistence() { return current; }

PersistenceScope::PersistenceScope(ConstantPersistence* persistence) : previous_(current) {
  current = persistence;
}

PersistenceScope::~PersistenceScope() { current = previous_; }

}  // namespace kiln::runtime
