#include "server/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace kiln::server {

void FutexWait(uint32_t* word, uint32_t expected, std::chrono::microseconds timeout) {
  const long us = static_cast<long>(timeout.count());
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  // Not FUTEX_PRIVATE_FLAG: the word is shared with another process.
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

}  // namespace kiln::server
