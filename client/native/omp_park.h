// Keeping PyTorch's OpenMP workers off the cores while the daemon runs.
//
// After each parallel region, libgomp's workers spin for a few
// milliseconds before they sleep (OMP_WAIT_POLICY unset; it is read once,
// when torch is imported, so the client cannot change it). When a model
// keeps nodes in eager PyTorch between its partitions, the eager op's
// workers are still spinning when the client posts the next call, and take
// a core from the daemon's threads for the first milliseconds of the run;
// oneDNN splits its work evenly between threads, so the whole run waits
// for the one that shares a core.
//
// WaitParked runs the client's wait inside an OpenMP parallel region of
// PyTorch's own libgomp: the calling thread waits for the reply, the
// workers sleep on a futex until it has one. It does so only when a worker
// is spinning at the time (a thread in state R), so a client whose workers
// sleep is never woken by it.
#pragma once

namespace kiln_native {

// wait(ctx) on the calling thread, with PyTorch's OpenMP workers asleep
// meanwhile if they are spinning now; wait's result.
bool WaitParked(bool (*wait)(void*), void* ctx);

// Calls that parked workers, for tests and stats (process-wide).
unsigned long long ParkedCalls();

}  // namespace kiln_native
