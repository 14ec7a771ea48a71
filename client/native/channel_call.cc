// One whole call through a call channel, in C++ (module.cc exposes it).
//
// Between the daemon's runs the client does little work but does it cold:
// the run kept both cores busy and evicted the caller's caches, so the
// interpreter's own code and objects miss as much as the tensors do. In
// Python, checking and copying the inputs, allocating the outputs, posting
// the call, waiting and copying the outputs back are a visible share of a
// small CNN's call (bench/server/call_breakdown.py, "client shim"). Here
// the same steps are one C call.
//
// The path is deliberately narrow: dense inputs of exactly the compiled
// dtype and shape, outputs copied from the call's arena (not the output
// pool), an idle channel. Anything else returns None before anything is
// posted, and kiln/subgraph.py takes its general path, which checks,
// explains and raises. Errors and slow calls go back to Python too: when
// the daemon has not answered OK within wait_s, the caller finishes the
// call with channel.py's own waiting (liveness checks, deadline) and reply
// handling.
//
// The channel block's layout is kilnd's (server/call_channel_layout.h),
// included here rather than copied.

#include "client/native/channel_call.h"

#include <ATen/ops/empty_strided.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <exception>
#include <vector>

#include "client/native/omp_park.h"
#include "client/native/stream_copy.h"
#include "server/call_channel_layout.h"

namespace kiln_native {
namespace {

namespace layout = kiln::server;
using Clock = std::chrono::steady_clock;

// The plan's words (native uint64; kiln/native.py's pack_plan writes them).
class PlanReader {
 public:
  PlanReader(const uint64_t* words, size_t n) : words_(words), n_(n) {}
  bool Take(size_t count, const uint64_t** out) {
    if (count > n_ - at_) return false;
    *out = words_ + at_;
    at_ += count;
    return true;
  }
  bool Next(uint64_t* v) {
    const uint64_t* p;
    if (!Take(1, &p)) return false;
    *v = *p;
    return true;
  }
  bool AtEnd() const { return at_ == n_; }

 private:
  const uint64_t* words_;
  size_t n_;
  size_t at_ = 0;
};

struct Input {
  uint64_t position, address, nbytes, dtype, ndim;
  const uint64_t* dims;
};

struct Output {
  uint64_t address, nbytes, dtype, ndim;
  const uint64_t* dims;
  const uint64_t* strides;
};

struct Plan {
  uint64_t stream_min = 0;
  std::vector<Input> inputs;
  std::vector<Output> outputs;
  const uint64_t* slots = nullptr;
};

constexpr uint64_t kMaxDims = 16;

bool Parse(const Py_buffer& buffer, Plan* plan) {
  if (buffer.len % sizeof(uint64_t) != 0) return false;
  PlanReader r(static_cast<const uint64_t*>(buffer.buf), buffer.len / sizeof(uint64_t));
  uint64_t n_in, n_out;
  if (!r.Next(&n_in) || !r.Next(&n_out) || !r.Next(&plan->stream_min))
    return false;
  if (n_in > (1u << 16) || n_out > (1u << 16)) return false;
  plan->inputs.resize(n_in);
  for (Input& in : plan->inputs) {
    if (!r.Next(&in.position) || !r.Next(&in.address) || !r.Next(&in.nbytes) ||
        !r.Next(&in.dtype) || !r.Next(&in.ndim) || in.ndim > kMaxDims ||
        !r.Take(in.ndim, &in.dims))
      return false;
  }
  plan->outputs.resize(n_out);
  for (Output& out : plan->outputs) {
    if (!r.Next(&out.address) || !r.Next(&out.nbytes) || !r.Next(&out.dtype) ||
        !r.Next(&out.ndim) || out.ndim > kMaxDims || !r.Take(out.ndim, &out.dims) ||
        !r.Take(out.ndim, &out.strides))
      return false;
  }
  return r.Take(3 * (n_in + n_out), &plan->slots) && r.AtEnd();
}

// Whether obj is a dense CPU tensor of exactly the planned dtype and shape
// (else the general path decides what to do); its data in *data.
bool DenseInput(PyObject* obj, const Input& want, const char** data) {
  if (!THPVariable_Check(obj)) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.layout() != c10::kStrided || !t.device().is_cpu() ||
      static_cast<uint64_t>(t.scalar_type()) != want.dtype ||
      static_cast<uint64_t>(t.dim()) != want.ndim || t.is_conj() || t.is_neg() ||
      !t.has_storage())
    return false;
  for (uint64_t d = 0; d < want.ndim; ++d) {
    if (static_cast<uint64_t>(t.sizes()[d]) != want.dims[d]) return false;
  }
  if (!t.is_contiguous() || t.nbytes() != want.nbytes) return false;
  *data = static_cast<const char*>(t.const_data_ptr());
  return want.nbytes == 0 || *data != nullptr;
}

uint32_t* Word(uint8_t* base, uint64_t offset) {
  return reinterpret_cast<uint32_t*>(base + offset);
}

// Not FUTEX_PRIVATE_FLAG: the word is shared with kilnd.
void FutexWake(uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, 1, nullptr, nullptr, 0); }

void FutexWait(uint32_t* word, uint32_t seen, Clock::duration left) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

// Posts the call and waits for the reply, spinning first; true once the
// state word says the reply is there.
bool PostAndWait(uint8_t* base, const Plan& plan, uint64_t seq, uint64_t handle, double spin_s,
                 double wait_s) {
  const uint64_t n_in = plan.inputs.size(), n_out = plan.outputs.size();
  layout::WriteField<uint64_t>(base, layout::kRequestSeqOffset, seq);
  layout::WriteField<uint64_t>(base, layout::kRequestHandleOffset, handle);
  layout::WriteField<uint32_t>(base, layout::kRequestInputsOffset, static_cast<uint32_t>(n_in));
  layout::WriteField<uint32_t>(base, layout::kRequestOutputsOffset, static_cast<uint32_t>(n_out));
  std::memcpy(base + layout::kSlotsOffset, plan.slots, (n_in + n_out) * layout::kSlotBytes);
  uint32_t* state = Word(base, layout::kChannelStateOffset);
  __atomic_store_n(state, layout::kChannelRequest, __ATOMIC_RELEASE);
  FutexWake(state);

  const auto start = Clock::now();
  const auto spin_until = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(spin_s));
  const auto wait_until = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(wait_s));
  const uint32_t* closed = Word(base, layout::kChannelClosedOffset);
  while (true) {
    const uint32_t seen = __atomic_load_n(state, __ATOMIC_ACQUIRE);
    if (seen == layout::kChannelReply) return true;
    if (__atomic_load_n(closed, __ATOMIC_ACQUIRE) != 0) return false;
    const auto now = Clock::now();
    if (now >= wait_until) return false;
    if (now < spin_until) {
      __builtin_ia32_pause();
      continue;
    }
    FutexWait(state, seen, wait_until - now);
  }
}

struct WaitArgs {
  uint8_t* base;
  const Plan* plan;
  uint64_t seq, handle;
  double spin_s, wait_s;
};

bool PostAndWaitFor(void* p) {
  const auto* w = static_cast<const WaitArgs*>(p);
  return PostAndWait(w->base, *w->plan, w->seq, w->handle, w->spin_s, w->wait_s);
}

PyObject* Call(PyObject* call_args, const Plan& plan, uint8_t* base, uint64_t seq,
               uint64_t handle, double spin_s, double wait_s, bool park) {
  const Py_ssize_t n_args = PyTuple_GET_SIZE(call_args);
  std::vector<const char*> sources(plan.inputs.size());
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const Input& in = plan.inputs[i];
    if (in.position >= static_cast<uint64_t>(n_args)) Py_RETURN_NONE;
    if (!DenseInput(PyTuple_GET_ITEM(call_args, in.position), in, &sources[i])) Py_RETURN_NONE;
  }
  if (__atomic_load_n(Word(base, layout::kChannelStateOffset), __ATOMIC_ACQUIRE) !=
          layout::kChannelIdle ||
      __atomic_load_n(Word(base, layout::kChannelClosedOffset), __ATOMIC_ACQUIRE) != 0)
    Py_RETURN_NONE;

  // Allocated before the call: after sleeping through the run everything
  // this thread touches is cold.
  std::vector<at::Tensor> outputs;
  std::vector<void*> destinations;
  outputs.reserve(plan.outputs.size());
  for (const Output& out : plan.outputs) {
    std::vector<int64_t> dims(out.dims, out.dims + out.ndim);
    std::vector<int64_t> strides(out.strides, out.strides + out.ndim);
    outputs.push_back(at::empty_strided(
        dims, strides, at::TensorOptions().dtype(static_cast<c10::ScalarType>(out.dtype))));
    if (outputs.back().nbytes() != out.nbytes) {
      PyErr_SetString(PyExc_ValueError, "channel_call: an output's bytes differ from its plan");
      return nullptr;
    }
    destinations.push_back(outputs.back().mutable_data_ptr());
  }

  // Nothing below throws until the GIL is taken back.
  bool replied = false;
  double run_us = 0;
  Py_BEGIN_ALLOW_THREADS
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const Input& in = plan.inputs[i];
    char* dst = reinterpret_cast<char*>(in.address);
    if (in.nbytes == 0) continue;
    if (in.nbytes >= plan.stream_min) {
      CopyStreaming(dst, sources[i], in.nbytes);
    } else {
      std::memcpy(dst, sources[i], in.nbytes);
    }
  }
  WaitArgs wait{base, &plan, seq, handle, spin_s, wait_s};
  if ((park ? WaitParked(&PostAndWaitFor, &wait) : PostAndWaitFor(&wait)) &&
      layout::ReadField<int32_t>(base, layout::kReplyCodeOffset) == 0 &&
      layout::ReadField<uint64_t>(base, layout::kReplySeqOffset) == seq) {
    replied = true;
    run_us = layout::ReadField<double>(base, layout::kReplyRunUsOffset);
    for (size_t i = 0; i < plan.outputs.size(); ++i) {
      std::memcpy(destinations[i], reinterpret_cast<const void*>(plan.outputs[i].address),
                  plan.outputs[i].nbytes);
    }
    __atomic_store_n(Word(base, layout::kChannelStateOffset), layout::kChannelIdle,
                     __ATOMIC_RELEASE);
  }
  Py_END_ALLOW_THREADS

  PyObject* list = PyList_New(static_cast<Py_ssize_t>(outputs.size()));
  if (list == nullptr) return nullptr;
  for (size_t i = 0; i < outputs.size(); ++i) {
    PyObject* wrapped = THPVariable_Wrap(std::move(outputs[i]));
    if (wrapped == nullptr) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), wrapped);
  }
  if (!replied) return Py_BuildValue("(NO)", list, Py_None);
  return Py_BuildValue("(Nd)", list, run_us);
}

}  // namespace

PyObject* channel_call(PyObject* /*module*/, PyObject* args) {
  PyObject* call_args;
  Py_buffer plan_bytes;
  unsigned long long address, seq, handle;
  double spin_s, wait_s;
  int park = 0;
  if (!PyArg_ParseTuple(args, "O!y*KKKdd|p", &PyTuple_Type, &call_args, &plan_bytes, &address,
                        &seq, &handle, &spin_s, &wait_s, &park))
    return nullptr;
  PyObject* result = nullptr;
  Plan plan;  // points into plan_bytes: released last
  if (!Parse(plan_bytes, &plan) || address == 0) {
    PyErr_SetString(PyExc_ValueError, "channel_call: malformed plan or null channel");
  } else {
    try {
      result = Call(call_args, plan, reinterpret_cast<uint8_t*>(address), seq, handle, spin_s,
                    wait_s, park != 0);
    } catch (const std::exception& e) {  // torch's checks throw; never across the C API
      PyErr_SetString(PyExc_RuntimeError, e.what());
      result = nullptr;
    } catch (...) {
      PyErr_SetString(PyExc_RuntimeError, "channel_call: unknown C++ exception");
      result = nullptr;
    }
  }
  PyBuffer_Release(&plan_bytes);
  return result;
}

PyObject* parked_calls(PyObject* /*module*/, PyObject* /*args*/) {
  return PyLong_FromUnsignedLongLong(ParkedCalls());
}

PyObject* scalar_type(PyObject* /*module*/, PyObject* args) {
  PyObject* dtype;
  if (!PyArg_ParseTuple(args, "O", &dtype)) return nullptr;
  if (!THPDtype_Check(dtype)) {
    PyErr_SetString(PyExc_TypeError, "scalar_type: expected a torch.dtype");
    return nullptr;
  }
  return PyLong_FromLong(static_cast<long>(reinterpret_cast<THPDtype*>(dtype)->scalar_type));
}

}  // namespace kiln_native
