#include "server/client_memory_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

// One registered mapping. Written under g_mu; read by the signal handler
// without a lock, as a seqlock: `seq` is odd while the slot is rewritten.
struct Slot {
  std::atomic<uint32_t> seq{0};
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> size{0};
  std::atomic<bool> broken{false};
};

Slot g_slots[kMaxGuardedMappings];
// Slots at or past this index have never been used: the handler stops there.
std::atomic<size_t> g_used{0};
std::mutex g_mu;
struct sigaction g_previous;
std::once_flag g_install_once;

void Write(Slot& slot, uintptr_t base, size_t size) {
  const uint32_t seq = slot.seq.load(std::memory_order_relaxed);
  slot.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.base.store(base, std::memory_order_relaxed);
  slot.size.store(size, std::memory_order_relaxed);
  slot.broken.store(false, std::memory_order_relaxed);
  slot.seq.store(seq + 2, std::memory_order_release);
}

// Replaces the mapping that holds `addr` by zero pages; false when no
// registered mapping holds it.
bool Rescue(uintptr_t addr) {
  const size_t used = g_used.load(std::memory_order_acquire);
  for (size_t i = 0; i < used; ++i) {
    Slot& slot = g_slots[i];
    const uint32_t before = slot.seq.load(std::memory_order_acquire);
    if (before & 1) continue;
    const uintptr_t base = slot.base.load(std::memory_order_relaxed);
    const size_t size = slot.size.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) != before) continue;
    if (base == 0 || addr < base || addr - base >= size) continue;
    // The faulting thread is using this mapping, so it is alive and stays
    // registered until that use ends: the range is still ours to replace.
    void* got = mmap(reinterpret_cast<void*>(base), size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (got == MAP_FAILED) return false;
    slot.broken.store(true, std::memory_order_release);
    return true;
  }
  return false;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  // si_code > 0: raised by the kernel for an access (not sent by kill).
  if (info != nullptr && info->si_code > 0 && Rescue(reinterpret_cast<uintptr_t>(info->si_addr))) {
    return;  // the access runs again, on the replacement pages
  }
  // Not ours: whatever handled SIGBUS before takes this one.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  sigaction(SIGBUS, &g_previous, nullptr);
  // A fault re-runs the access and faults again into the default action;
  // a signal that was sent must be sent again.
  if (info == nullptr || info->si_code <= 0) raise(SIGBUS);
}

}  // namespace

void InstallClientMemoryGuard() {
  std::call_once(g_install_once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous);
  });
}

absl::StatusOr<size_t> RegisterGuardedMapping(void* base, size_t size) {
  InstallClientMemoryGuard();
  std::lock_guard<std::mutex> lock(g_mu);
  const size_t used = g_used.load(std::memory_order_relaxed);
  for (size_t i = 0; i < kMaxGuardedMappings; ++i) {
    if (i < used && g_slots[i].base.load(std::memory_order_relaxed) != 0) continue;
    Write(g_slots[i], reinterpret_cast<uintptr_t>(base), size);
    if (i >= used) g_used.store(i + 1, std::memory_order_release);
    return i;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the daemon has ", kMaxGuardedMappings,
      " shared-memory regions registered by all its clients; unregister some first"));
}

void UnregisterGuardedMapping(size_t slot) {
  std::lock_guard<std::mutex> lock(g_mu);
  Write(g_slots[slot], 0, 0);
}

bool GuardedMappingBroken(size_t slot) {
  return g_slots[slot].broken.load(std::memory_order_acquire);
}

}  // namespace kiln::server
