#include "client/native/omp_park.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <vector>

namespace kiln_native {
namespace {

// The entry points of the libgomp torch loaded (by soname: never a second
// copy), or null when the process has none (another OpenMP runtime, or
// PyTorch built without OpenMP).
struct Gomp {
  void (*parallel)(void (*)(void*), void*, unsigned, unsigned) = nullptr;
  int (*thread_num)() = nullptr;
  int (*max_threads)() = nullptr;
};

const Gomp* LoadGomp() {
  static const Gomp* gomp = []() -> const Gomp* {
    void* lib = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (lib == nullptr) return nullptr;
    Gomp g;
    g.parallel = reinterpret_cast<decltype(g.parallel)>(dlsym(lib, "GOMP_parallel"));
    g.thread_num = reinterpret_cast<decltype(g.thread_num)>(dlsym(lib, "omp_get_thread_num"));
    g.max_threads = reinterpret_cast<decltype(g.max_threads)>(dlsym(lib, "omp_get_max_threads"));
    if (g.parallel == nullptr || g.thread_num == nullptr || g.max_threads == nullptr) {
      return nullptr;
    }
    return new Gomp(g);  // process lifetime
  }();
  return gomp;
}

pid_t ThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// The worker threads of the OpenMP pool of one calling thread (libgomp
// keeps a pool per thread that starts regions), learned by a region.
struct Pool {
  pid_t master = 0;
  std::vector<pid_t> workers;
};
std::mutex pool_mu;
Pool pool;  // guarded by pool_mu
std::atomic<unsigned long long> parked_calls{0};

struct Learn {
  const Gomp* gomp;
  std::vector<pid_t>* tids;
};

void LearnBody(void* p) {
  auto* l = static_cast<Learn*>(p);
  const int i = l->gomp->thread_num();
  if (i >= 0 && static_cast<size_t>(i) < l->tids->size()) (*l->tids)[i] = ThreadId();
}

// Whether thread `tid` of this process is running or runnable (state R).
bool Running(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[256];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "tid (comm) S ...": the state follows the last ')'.
  const char* close_paren = nullptr;
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] == ')') close_paren = buf + i;
  }
  return close_paren != nullptr && close_paren[1] == ' ' && close_paren[2] == 'R';
}

// Whether a worker of this thread's pool is spinning now. Learns the pool
// on the first call from a thread (and again when its size changed); only
// the first thread that calls is watched.
bool WorkersSpinning(const Gomp& gomp) {
  const int threads = gomp.max_threads();
  if (threads < 2) return false;
  const pid_t self = ThreadId();
  std::vector<pid_t> workers;
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (pool.master != 0 && pool.master != self) return false;
    if (pool.master == self && pool.workers.size() + 1 == static_cast<size_t>(threads)) {
      workers = pool.workers;
    }
  }
  if (workers.empty()) {
    std::vector<pid_t> tids(threads, 0);
    Learn learn{&gomp, &tids};
    gomp.parallel(&LearnBody, &learn, static_cast<unsigned>(threads), 0);
    workers.assign(tids.begin() + 1, tids.end());
    std::lock_guard<std::mutex> lock(pool_mu);
    pool.master = self;
    pool.workers = workers;
    return false;  // just woken by the learning region, not by the user's work
  }
  // The workers leave a region together and spin for the same time: a few
  // of them tell, and a host with many cores pays a few /proc reads, not
  // one per core.
  constexpr size_t kLooked = 4;
  for (size_t i = 0; i < workers.size() && i < kLooked; ++i) {
    if (workers[i] != 0 && Running(workers[i])) return true;
  }
  return false;
}

struct Parked {
  const Gomp* gomp;
  bool (*wait)(void*);
  void* ctx;
  bool result = false;
  uint32_t done = 0;
};

void ParkedBody(void* p) {
  auto* k = static_cast<Parked*>(p);
  if (k->gomp->thread_num() == 0) {
    k->result = k->wait(k->ctx);
    __atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &k->done, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
    return;
  }
  // A bounded sleep per round, so a lost wake-up costs a second, never a hang.
  const timespec second{1, 0};
  while (__atomic_load_n(&k->done, __ATOMIC_ACQUIRE) == 0) {
    syscall(SYS_futex, &k->done, FUTEX_WAIT_PRIVATE, 0, &second, nullptr, 0);
  }
}

}  // namespace

bool WaitParked(bool (*wait)(void*), void* ctx) {
  const Gomp* gomp = LoadGomp();
  if (gomp == nullptr || !WorkersSpinning(*gomp)) return wait(ctx);
  Parked parked{gomp, wait, ctx};
  gomp->parallel(&ParkedBody, &parked, static_cast<unsigned>(gomp->max_threads()), 0);
  parked_calls.fetch_add(1, std::memory_order_relaxed);
  return parked.result;
}

unsigned long long ParkedCalls() { return parked_calls.load(std::memory_order_relaxed); }

}  // namespace kiln_native
