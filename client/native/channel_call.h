// channel_call: one whole call through a call channel (channel_call.cc).
#pragma once

#include <Python.h>

namespace kiln_native {

// channel_call(args, plan, channel_address, seq, handle, spin_s, wait_s, park=False)
//   -> None, or (outputs, run_us)
//
// args: the partition's arguments (a tuple). plan: bytes from
// kiln/native.py's pack_plan (which argument goes where, the expected
// metas, the outputs' metas and addresses, the slot bytes).
// channel_address: the channel block, idle. Posts a call of the graph
// `handle` as call number seq.
//
// None: the call is not one this path takes (an input of another dtype,
// shape or layout, the channel busy or closed); nothing was posted and the
// caller takes its general path. Otherwise a list of fresh output tensors
// and, when the daemon answered OK within wait_s (spinning for the first
// spin_s), its run time in microseconds with the outputs filled in and the
// channel idle again; else run_us is None and the caller finishes the call
// (waits on, reads the reply, copies the outputs). park: wait with
// PyTorch's OpenMP workers asleep if they are spinning (omp_park.h), for
// runs long enough to repay waking them.
PyObject* channel_call(PyObject* module, PyObject* args);

// scalar_type(dtype) -> the int code of a torch.dtype, as plans spell it.
PyObject* scalar_type(PyObject* module, PyObject* args);

// parked_calls() -> the number of calls that put PyTorch's OpenMP workers
// to sleep while they waited (process-wide).
PyObject* parked_calls(PyObject* module, PyObject* args);

}  // namespace kiln_native
