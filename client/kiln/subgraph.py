"""KilnSubgraph: runs one fused partition in the daemon.

Lifecycle: prepare (hash and upload constants, compile -> handle) happens
at construction and again whenever a weight changes or the daemon was
restarted; each call then writes the inputs into this thread's arena,
executes and copies the outputs back into fresh tensors.

If the daemon rejects the graph (INVALID_ARGUMENT / UNIMPLEMENTED) the
partition runs in eager from then on: a wrong answer is worse than a
fallback.

A partition with symbolic sizes compiles to a template; each new input
signature (tensor shapes and size values) gets a variant from the
daemon's Specialize (the graph is not sent again) and its own call plan,
kept for up to MAX_VARIANTS signatures (least recently used released).
The plans are call_plan.py's, the variants' bookkeeping shape_variants.py's.
"""
from __future__ import annotations

import ctypes
import logging
import operator
import os
import threading
from typing import Callable, Mapping, Sequence

import grpc
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import is_fake

from kiln import channel as channel_mod
from kiln import connection as connection_mod
from kiln import native, serialize, shape_variants, shm
from kiln.call_plan import CallPlan, Mismatch
from kiln.v1 import kiln_pb2

log = logging.getLogger(__name__)

_REJECTED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED)


class KilnSubgraph(torch.nn.Module):
    """Drop-in replacement for a fused partition GraphModule.

    `constant_positions` are the positions of the partition's inputs that
    are parameters/buffers; they are baked into the compiled graph by
    content hash and checked for changes (data_ptr, _version) on each call.
    """

    # Shape variants of a dynamic-shape partition kept at once (each holds a
    # daemon handle, i.e. a compiled graph with its memory plan).
    MAX_VARIANTS = 64

    def __init__(self, name: str, gm: fx.GraphModule, constant_positions: Sequence[int],
                 example_args: Sequence[torch.Tensor], conn: connection_mod.Connection,
                 model_caching: bool = True,
                 on_fallback: Callable[["KilnSubgraph"], None] | None = None,
                 compile_options: Mapping[str, str] | None = None,
                 timeout_s: float = connection_mod.EXECUTE_TIMEOUT_S,
                 writes_back: Sequence[tuple[int, int]] = ()):
        super().__init__()
        self.name = name
        # (output, argument position): outputs that are an updated value of
        # an argument the caller writes them back into (a static KV cache).
        # The daemon may compute them over that argument's own bytes
        # (Graph.outputs_over_inputs; call_plan.CallPlan.over_inputs).
        self.writes_back = tuple(writes_back)
        self.eager = gm
        self.conn = conn
        self.model_caching = model_caching
        # CompileRequest.options: the runtime config (options.RuntimeConfig).
        self.compile_options = dict(compile_options or {})
        self.constant_positions = tuple(constant_positions)
        self.num_nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        self.timeout_s = timeout_s
        # Set by the backend when nodes left in eager compute right after
        # this partition: its calls tell the daemon (channel.py).
        self.client_computes_next = False
        self.fallback = False
        self.fallback_reason = ""
        # Set once the partition is in service under fallback="error": a
        # later rejection (e.g. on a recompile) raises instead.
        self.raise_on_fallback = False
        self.compiles = 0
        # The options as the daemon applied them (CompileResponse.options:
        # its choice for precision "auto" among them); "" until compiled.
        self.applied_options = ""
        # Constants this partition needed, summed over its compiles:
        # uploaded by it, or already in the daemon (kiln.explain reports both).
        self.constant_transfer = connection_mod.ConstantTransfer()
        # Called when the partition switches to eager after construction.
        self.on_fallback = on_fallback
        self._lock = threading.Lock()
        self._handle: int | None = None
        self._generation = -1
        self._serialized: serialize.SerializedGraph | None = None
        # position -> (data_ptr, version, hash) of the constant compiled in
        # (native.recorded_version: inference tensors have no version).
        self._constant_state: dict[int, tuple[int, int, str]] = {}
        # Holding the compiled-in constants keeps their storage alive, so a
        # different tensor can never show up at the same data_ptr.
        self._constant_tensors: dict[str, torch.Tensor] = {}
        self._constant_objects: tuple[torch.Tensor, ...] = ()
        self._constant_expected = b""  # native.pack_expected(_constant_objects)
        self._take_constants = (operator.itemgetter(*constant_positions)
                                if constant_positions else None)
        self._plan: CallPlan | None = None
        self._over_inputs: dict[int, int] = {}  # output -> input index (CallPlan.over_inputs)
        # Dynamic shapes: the template handle is self._handle; each
        # signature's variant has a plan (plan.handle) here.
        self._variants = shape_variants.VariantCache()
        self.specializations = 0
        self._input_vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        # Compiled now when the weights' values are at hand; AOTAutograd
        # compiles with fake tensors, so then at the first call.
        if not any(is_fake(example_args[pos]) for pos in self.constant_positions):
            with self._lock:
                self._run_guarded(lambda: self._prepare(example_args))

    # ---------------------------------------------------------- preparing --

    def _constants_changed(self, args: Sequence[torch.Tensor]) -> bool:
        # Per call, so kept to C-level loops: the very tensor objects
        # compiled in, each at the version it had (any in-place change,
        # load_state_dict or optimizer step bumps it) and over the same
        # storage (`param.data = other` swaps it without bumping the
        # version). Anything else goes through _prepare, which compares
        # data pointers and hashes.
        if not self.constant_positions:
            return False
        got = self._take_constants(args)
        if len(self.constant_positions) == 1:
            got = (got,)
        if native.weights_unchanged is not None:  # the same checks in C++
            same = native.weights_unchanged(got, self._constant_objects,
                                            self._constant_expected)
            if same is not None:
                return not same
        return not (all(map(operator.is_, got, self._constant_objects))
                    and native.pack_expected(got) == self._constant_expected)

    def _prepare(self, args: Sequence[torch.Tensor]) -> None:
        """Hashes constants and (re)compiles if needed, uploading the
        constants the daemon asks for."""
        rebuild = self._serialized is None
        state: dict[int, tuple[int, int, str]] = {}
        tensors: dict[str, torch.Tensor] = {}
        stale = [pos for pos in self.constant_positions
                 if (old := self._constant_state.get(pos)) is None
                 or old[0] != args[pos].data_ptr()
                 or old[1] != native.recorded_version(args[pos])]
        digests = dict(zip(stale, connection_mod.sha256_many([args[p] for p in stale])))
        for pos in self.constant_positions:
            t = args[pos]
            val = self._input_vals[pos]
            if (isinstance(val, torch.Tensor) and _static(val.shape)
                    and (t.shape != val.shape or t.dtype != val.dtype)):
                # `param.data = other` with another shape, under guards
                # that did not recompile (Dynamo's dict-tag guards skip an
                # unchanged module's): the graph was traced for the old one.
                raise Mismatch(f"weight input {pos} is now {t.dtype}{list(t.shape)}, "
                               f"traced as {val.dtype}{list(val.shape)}")
            old = self._constant_state.get(pos)
            if pos in digests:
                digest = digests[pos]
                rebuild = rebuild or old is None or old[2] != digest
            else:
                digest = old[2]
            state[pos] = (t.data_ptr(), native.recorded_version(t), digest)
            tensors[digest] = t.detach()
        if rebuild:
            self._serialized = serialize.serialize(
                self.eager, {pos: s[2] for pos, s in state.items()})
            positions = self._serialized.tensor_positions
            self._over_inputs = {output: positions.index(pos) for output, pos in self.writes_back
                                 if pos in positions}
            for output, index in self._over_inputs.items():
                self._serialized.graph.outputs_over_inputs.add(output=output, input=index)
            self._plan = (None if self._serialized.dynamic
                          else CallPlan.for_static(self._serialized, self._over_inputs))
        needs_compile = rebuild or self._handle is None or self._generation != self.conn.generation
        self._constant_state = state
        self._constant_tensors = tensors
        self._constant_objects = tuple(args[pos] for pos in self.constant_positions)
        self._constant_expected = native.pack_expected(self._constant_objects)
        if not needs_compile:
            return
        self.conn.connect()
        generation = self.conn.generation
        self._release()
        self.conn.flush_releases()
        response = self._compile(tensors)
        _write_dump(response)
        self._handle = response.handle
        self._generation = generation
        self.compiles += 1
        if response.options:  # a template's come with its variants
            self.applied_options = response.options
        if response.dynamic:
            # The variant for a call's arguments now (not for construction's
            # weights-only examples): a rejection surfaces here, not later.
            ser = self._serialized
            if all(isinstance(args[i], torch.Tensor) and not is_fake(args[i])
                   for i in ser.tensor_positions):
                self._variant(args)
            return
        if self._serialized.dynamic:
            raise Mismatch("the daemon compiled a dynamic-shape graph as static")
        self._plan.handle = response.handle
        self._check_outputs(response)  # raises Mismatch -> eager, which releases
        log.debug("%s compiled: handle %d, cache_hit=%s, %.1f ms", self.name,
                  response.handle, response.cache_hit, response.compile_ms)

    def _compile(self, tensors: dict[str, torch.Tensor]) -> kiln_pb2.CompileResponse:
        """Compiles, uploading only the weights the daemon says it needs.

        A graph the daemon (or its cache directory, or the fleet's) compiled
        before needs few of its weights or none (its folds and packings are
        saved), so the daemon is asked first. The last attempt uploads
        whatever the daemon lacks and reports a refusal as an error."""
        request = kiln_pb2.CompileRequest(session_id=self.conn.session_id,
                                          graph=self._serialized.graph,
                                          options=self.compile_options,
                                          model_caching=self.model_caching,
                                          want_dump=bool(os.environ.get("KILN_DUMP")),
                                          report_missing=True)
        transfer = connection_mod.ConstantTransfer()
        asked: set[str] = set()
        for _ in range(2):
            try:
                response = self.conn.stub.Compile(request,
                                                  timeout=connection_mod.COMPILE_TIMEOUT_S)
            except grpc.RpcError as e:
                # A daemon older than report_missing refuses instead.
                if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                missing = [""]
                break
            missing = list(response.missing_constants)
            if not missing:
                break
            if any(h not in tensors for h in missing):
                break  # not weights of this graph: upload them all
            # This client may count them as held: the daemon drops weights
            # no graph reads after a grace period.
            self.conn.forget_constants(missing)
            transfer.add(self.conn.ensure_constants({h: tensors[h] for h in missing}))
            asked.update(missing)
        if missing:
            log.debug("%s: daemon asks for weights again; uploading every one", self.name)
            self.conn.forget_constants(tensors)
            transfer = self.conn.ensure_constants(tensors)
            asked.update(tensors)
            request.report_missing = False
            response = self.conn.stub.Compile(request, timeout=connection_mod.COMPILE_TIMEOUT_S)
        # Never asked for: the daemon held what the compiled graph reads
        # (these weights, or what it made of them).
        for h, t in tensors.items():
            if h not in asked:
                transfer.reused += 1
                transfer.reused_bytes += t.numel() * t.element_size()
        self.constant_transfer.add(transfer)
        return response

    def _check_outputs(self, response: kiln_pb2.CompileResponse) -> None:
        expected = self._serialized.output_vals
        if len(response.outputs) != len(expected):
            raise Mismatch(f"daemon reports {len(response.outputs)} outputs, "
                           f"expected {len(expected)}")
        for i, (meta, val) in enumerate(zip(response.outputs, expected)):
            if meta.dtype != shm.wire_dtype(val.dtype) or list(meta.shape) != list(val.shape):
                raise Mismatch(
                    f"output {i}: daemon infers {kiln_pb2.DType.Name(meta.dtype)}"
                    f"{list(meta.shape)}, eager gives {val.dtype}{list(val.shape)}")

    def _release(self) -> None:
        handles = [plan.handle for plan in self._variants.clear()]
        if self._handle is not None:
            handles.append(self._handle)
        self._handle = None
        if self._generation != self.conn.generation:
            return  # died with the old session
        for handle in handles:
            self._release_handle(handle)

    def _release_handle(self, handle: int) -> None:
        try:
            self.conn.stub.Release(
                kiln_pb2.ReleaseRequest(session_id=self.conn.session_id, handle=handle),
                timeout=connection_mod.SMALL_CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            log.debug("Release(%d) failed: %s", handle, e.details())

    # ------------------------------------------------------ dynamic shapes --

    def _variant(self, args: Sequence[object]) -> CallPlan:
        """The call plan (and daemon handle) for this call's signature,
        specialized by the daemon on first sight."""
        ser = self._serialized
        key = shape_variants.signature(ser, args)
        plan = self._variants.get(key)
        if plan is not None:
            return plan
        request = kiln_pb2.SpecializeRequest(
            session_id=self.conn.session_id, handle=self._handle,
            sizes=[int(args[i]) for i in ser.size_positions],
            want_dump=bool(os.environ.get("KILN_DUMP")))
        for i in ser.tensor_positions:
            request.inputs.append(shm.tensor_meta(args[i].dtype, args[i].shape))
        response = self.conn.stub.Specialize(request, timeout=connection_mod.COMPILE_TIMEOUT_S)
        _write_dump(response)
        try:
            plan = CallPlan.for_variant(ser, args, response,
                                        shape_variants.size_bindings(self._input_vals, args),
                                        self._over_inputs)
        except Mismatch:
            self._release_handle(response.handle)
            raise
        plan.handle = response.handle
        self.applied_options = response.options
        self.specializations += 1
        log.debug("%s specialized for %s: handle %d, cache_hit=%s, %.1f ms", self.name, key,
                  response.handle, response.cache_hit, response.compile_ms)
        for old in self._variants.add(key, plan, self.MAX_VARIANTS):
            self._release_handle(old.handle)
        return plan

    def _run_guarded(self, step: Callable[[], object]) -> object:
        """Runs step; on daemon loss reconnects and retries once; on
        rejection switches this partition to eager (returns None)."""
        for attempt in (0, 1):
            generation = self.conn.generation
            try:
                return step()
            except grpc.RpcError as e:
                if attempt == 0 and connection_mod.is_daemon_lost(e):
                    self.conn.reconnect(generation)
                    continue
                if e.code() in _REJECTED:
                    self._switch_to_eager(f"{e.code().name}: {e.details()}")
                    return None
                raise
            except (serialize.SerializationError, Mismatch) as e:
                self._switch_to_eager(str(e))
                return None
        raise AssertionError("unreachable")

    def _switch_to_eager(self, reason: str) -> None:
        if self.raise_on_fallback:
            raise KilnFallbackError(f"kiln: daemon rejected partition {self.name} "
                                    f"(options fallback='error'): {reason}")
        log.warning("kiln: daemon rejected partition %s (%d nodes), running it in eager: %s",
                    self.name, self.num_nodes, reason)
        self.fallback = True
        self.fallback_reason = reason
        self._release()
        if self.on_fallback is not None:
            self.on_fallback(self)

    # ------------------------------------------------------------- calling --

    def forward(self, *args: torch.Tensor):
        if self.fallback:
            return self.eager(*args)
        with self._lock:
            result = self._run_guarded(lambda: self._call(args))
        if self.fallback:
            return self.eager(*args)
        return result

    def _call(self, args: Sequence[torch.Tensor]):
        if (self._handle is None or self._generation != self.conn.generation
                or self._constants_changed(args)):
            self._prepare(args)
        plan = self._plan or self._variant(args)
        conn = self.conn
        region = conn.arena().reserve(plan.total_bytes)
        if plan.region is not region:
            plan.bind(region)
        inputs = plan.take_inputs(args)
        # Earlier calls' large outputs passed back (a decode step's KV
        # cache) are read where they lie, not copied (output_pool.py).
        in_place = plan.inputs_in_place(conn.live_output_pool(), inputs)
        if plan.native_plan is not None and not in_place:
            outputs = self._call_native(plan, args)
            if outputs is not None:
                return outputs
        for i, (t, meta) in enumerate(zip(inputs, plan.input_metas)):
            if t.shape != meta[0] or t.dtype != meta[1]:
                raise Mismatch(f"input {i} is {t.dtype}{list(t.shape)}, compiled for "
                               f"{meta[1]}{list(meta[0])}")
        for i, (t, view) in enumerate(zip(inputs, plan.input_views)):
            if i not in in_place:
                shm.copy_tensor(view, t.detach(), stream=True)
        # An input's update whose input lies in an output block is written
        # over it: the caller's tensor is updated where it is (call_plan.py).
        over = plan.outputs_over(in_place)
        # Large outputs go to blocks of their own that become the returned
        # tensors (output_pool.py); the rest are copied out of the arena.
        pool, blocks = None, {}
        if plan.pooled_outputs:
            pool = conn.output_pool()
            blocks = plan.acquire_blocks(pool, skip=over)
        slots = plan.call_slots(blocks, in_place, over)
        # Allocated before the call, not after: once this thread has slept
        # through the run its caches are cold and everything costs more.
        # Fresh tensors with eager's strides: outputs never alias the arena.
        outputs = [None if i in blocks or i in over
                   else torch.empty_strided(shape, stride, dtype=dtype)
                   for i, (shape, stride, dtype) in enumerate(plan.output_metas)]

        try:
            chan = conn.channel()
            if chan is not None:
                chan.set_client_computes_next(self.client_computes_next)
                try:
                    chan.call(plan.handle, plan.num_inputs, plan.num_outputs, slots,
                              self.timeout_s, plan.spin_s(chan.last_run_us))
                except channel_mod.ChannelError as e:
                    if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                        conn.discard_thread_state()
                    raise
            else:
                conn.stub.Execute(plan.request(conn.session_id, plan.handle, blocks, in_place,
                                               over),
                                  timeout=self.timeout_s)
        except BaseException:
            for block in blocks.values():
                pool.discard(block)  # the daemon may still write it
            raise

        # Dense outputs (the usual case) by one memmove each from a source
        # address computed at bind time: the fewer calls into torch here,
        # right after the wait, the better (see above).
        for i, (out, view, dense) in enumerate(zip(outputs, plan.output_views,
                                                    plan.output_dense)):
            if i in over:
                outputs[i] = inputs[plan.over_inputs[i]]  # updated where it lies
            elif out is None:
                shape, _, dtype = plan.output_metas[i]
                outputs[i] = pool.tensor(blocks[i], dtype, shape)
            elif dense:
                ctypes.memmove(out.data_ptr(), dense[0], dense[1])
            else:
                shm.copy_tensor(out, view)
        for o, i in plan.over_inputs.items():
            if o in blocks and _adopt_storage(inputs[i], outputs[o]):
                outputs[o] = inputs[i]
        return outputs[0] if plan.single_output else tuple(outputs)

    def _call_native(self, plan: CallPlan, args: Sequence[torch.Tensor]):
        """The call in one C call (native.channel_call), or None when that
        path does not take it (then nothing was posted)."""
        chan = self.conn.channel()
        if chan is None:
            return None
        if type(args) is not tuple:
            args = tuple(args)
        chan.set_client_computes_next(self.client_computes_next)
        try:
            got = chan.call_native(args, plan.native_plan, plan.handle,
                                   plan.num_inputs + plan.num_outputs, self.timeout_s,
                                   plan.spin_s(chan.last_run_us), plan.park(chan.last_run_us))
        except channel_mod.ChannelError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                self.conn.discard_thread_state()
            raise
        if got is None:
            return None
        outputs, done = got
        if not done:  # finished in Python: the outputs are still in the arena
            for out, (address, nbytes) in zip(outputs, plan.output_dense):
                ctypes.memmove(out.data_ptr(), address, nbytes)
        return outputs[0] if plan.single_output else tuple(outputs)

    def close(self) -> None:
        with self._lock:
            self._release()

    def __del__(self) -> None:
        # Dropped without close() (e.g. torch._dynamo.reset()): let the
        # connection release the handles on its next compile.
        handle = getattr(self, "_handle", None)
        if handle is not None:
            self.conn.defer_release(self._generation, handle)
        variants = getattr(self, "_variants", None)
        for plan in variants.values() if variants is not None else ():
            self.conn.defer_release(self._generation, plan.handle)


class KilnFallbackError(RuntimeError):
    """Raised under options fallback="error" where nodes would run in eager."""


def _write_dump(response: kiln_pb2.CompileResponse) -> None:
    """Writes the daemon's optimized graph to $KILN_DUMP/<graph key>.txt."""
    directory = os.environ.get("KILN_DUMP")
    if not directory or not response.dump:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{response.graph_key[:16]}.txt")
    with open(path, "w") as f:
        f.write(response.dump)
    log.info("optimized graph written to %s", path)


def _adopt_storage(t: torch.Tensor, update: torch.Tensor) -> bool:
    """Moves `t` onto `update`'s memory (an output block holding t's updated
    value), so that the caller's write-back of it is a no-op and the next
    call reads and updates it there: a static KV cache is copied once, at
    its first update, instead of on every step. Only a plain, dense tensor
    that is its storage's one user and covers all of it: any view of the old
    storage would stop seeing the updates. False when it was left as is."""
    if (type(t) is not torch.Tensor or t.requires_grad or not t.is_contiguous()
            or t.storage_offset() != 0 or t.dtype != update.dtype
            or t.shape != update.shape or not update.is_contiguous()):
        return False
    storage = t.untyped_storage()
    # Uses of the storage: t, and `storage` itself.
    if storage.nbytes() != t.nbytes or torch._C._storage_Use_Count(storage._cdata) != 2:
        return False
    try:
        t.set_(update.untyped_storage(), update.storage_offset(), update.shape, update.stride())
    except RuntimeError:  # an inference tensor outside inference mode
        return False
    return True


def _static(shape: Sequence[object]) -> bool:
    return not any(isinstance(d, torch.SymInt) for d in shape)
