// Process-shared futex wait and wake on a 32-bit word in a MAP_SHARED
// mapping: the sleeping half of the call channel's handshake.
#pragma once

#include <chrono>
#include <cstdint>

namespace kiln::server {

// Sleeps while *word == expected, at most `timeout`; returns early on a
// wake, a signal, or when *word already differs. Callers re-check the word.
void FutexWait(uint32_t* word, uint32_t expected, std::chrono::microseconds timeout);

// Wakes every thread (of any process) sleeping on *word.
void FutexWakeAll(uint32_t* word);

// Atomic access to a word other processes write.
inline uint32_t LoadAcquire(const uint32_t* word) {
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}
inline void StoreRelease(uint32_t* word, uint32_t value) {
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
}
inline bool CompareExchange(uint32_t* word, uint32_t expected, uint32_t desired) {
  return __atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

}  // namespace kiln::server
