"""KilnSubgraph: runs one fused partition in the daemon.

Lifecycle: prepare (hash and upload constants, compile -> handle) happens
at construction and again whenever a weight changes or the daemon was
restarted; each call then writes the inputs into this thread's arena,
executes and copies the outputs back into fresh tensors.

If the daemon rejects the graph (INVALID_ARGUMENT / UNIMPLEMENTED) the
partition runs in eager from then on: a wrong answer is worse than a
fallback.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Mapping, Sequence

import grpc
import torch
import torch.fx as fx

from kiln import connection as connection_mod
from kiln import serialize, shm
from kiln.v1 import kiln_pb2

log = logging.getLogger(__name__)

_REJECTED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED)


class KilnSubgraph(torch.nn.Module):
    """Drop-in replacement for a fused partition GraphModule.

    `constant_positions` are the positions of the partition's inputs that
    are parameters/buffers; they are baked into the compiled graph by
    content hash and checked for changes (data_ptr, _version) on each call.
    """

    def __init__(self, name: str, gm: fx.GraphModule, constant_positions: Sequence[int],
                 example_args: Sequence[torch.Tensor], conn: connection_mod.Connection,
                 model_caching: bool = True,
                 on_fallback: Callable[["KilnSubgraph"], None] | None = None,
                 compile_options: Mapping[str, str] | None = None):
        super().__init__()
        self.name = name
        self.eager = gm
        self.conn = conn
        self.model_caching = model_caching
        # CompileRequest.options: the runtime config (options.RuntimeConfig).
        self.compile_options = dict(compile_options or {})
        self.constant_positions = tuple(constant_positions)
        self.num_nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        self.fallback = False
        self.fallback_reason = ""
        self.compiles = 0
        # Called when the partition switches to eager after construction.
        self.on_fallback = on_fallback
        self._lock = threading.Lock()
        self._handle: int | None = None
        self._generation = -1
        self._serialized: serialize.SerializedGraph | None = None
        # position -> (data_ptr, _version, hash) of the constant compiled in.
        self._constant_state: dict[int, tuple[int, int, str]] = {}
        # Holding the compiled-in constants keeps their storage alive, so a
        # different tensor can never show up at the same data_ptr.
        self._constant_tensors: dict[str, torch.Tensor] = {}
        with self._lock:
            self._run_guarded(lambda: self._prepare(example_args))

    # ---------------------------------------------------------- preparing --

    def _constants_changed(self, args: Sequence[torch.Tensor]) -> bool:
        for pos in self.constant_positions:
            t = args[pos]
            state = self._constant_state.get(pos)
            if state is None or state[0] != t.data_ptr() or state[1] != t._version:
                return True
        return False

    def _prepare(self, args: Sequence[torch.Tensor]) -> None:
        """Hashes constants, uploads missing ones and (re)compiles if needed."""
        rebuild = self._serialized is None
        state: dict[int, tuple[int, int, str]] = {}
        tensors: dict[str, torch.Tensor] = {}
        for pos in self.constant_positions:
            t = args[pos]
            old = self._constant_state.get(pos)
            if old is not None and old[0] == t.data_ptr() and old[1] == t._version:
                digest = old[2]
            else:
                digest = connection_mod.sha256_of(t)
                rebuild = rebuild or old is None or old[2] != digest
            state[pos] = (t.data_ptr(), t._version, digest)
            tensors[digest] = t.detach()
        if rebuild:
            self._serialized = serialize.serialize(
                self.eager, {pos: s[2] for pos, s in state.items()})
        needs_compile = rebuild or self._handle is None or self._generation != self.conn.generation
        self._constant_state = state
        self._constant_tensors = tensors
        if not needs_compile:
            return
        self.conn.connect()
        generation = self.conn.generation
        self.conn.ensure_constants(tensors)
        self._release()
        self.conn.flush_releases()
        response = self.conn.stub.Compile(
            kiln_pb2.CompileRequest(session_id=self.conn.session_id,
                                    graph=self._serialized.graph,
                                    options=self.compile_options,
                                    model_caching=self.model_caching,
                                    want_dump=bool(os.environ.get("KILN_DUMP"))),
            timeout=connection_mod.COMPILE_TIMEOUT_S)
        _write_dump(response)
        self._handle = response.handle
        self._generation = generation
        self._check_outputs(response)  # raises _Mismatch -> eager, which releases
        self.compiles += 1
        log.debug("%s compiled: handle %d, cache_hit=%s, %.1f ms", self.name,
                  response.handle, response.cache_hit, response.compile_ms)

    def _check_outputs(self, response: kiln_pb2.CompileResponse) -> None:
        expected = self._serialized.output_vals
        if len(response.outputs) != len(expected):
            raise _Mismatch(f"daemon reports {len(response.outputs)} outputs, "
                            f"expected {len(expected)}")
        for i, (meta, val) in enumerate(zip(response.outputs, expected)):
            if meta.dtype != shm.wire_dtype(val.dtype) or list(meta.shape) != list(val.shape):
                raise _Mismatch(
                    f"output {i}: daemon infers {kiln_pb2.DType.Name(meta.dtype)}"
                    f"{list(meta.shape)}, eager gives {val.dtype}{list(val.shape)}")

    def _release(self) -> None:
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        if self._generation != self.conn.generation:
            return  # died with the old session
        try:
            self.conn.stub.Release(
                kiln_pb2.ReleaseRequest(session_id=self.conn.session_id, handle=handle),
                timeout=connection_mod.SMALL_CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            log.debug("Release(%d) failed: %s", handle, e.details())

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
            except (serialize.SerializationError, _Mismatch) as e:
                self._switch_to_eager(str(e))
                return None
        raise AssertionError("unreachable")

    def _switch_to_eager(self, reason: str) -> None:
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
        ser = self._serialized
        constant = set(self.constant_positions)
        inputs = [a for i, a in enumerate(args) if i not in constant]
        for i, (t, meta) in enumerate(zip(inputs, ser.input_metas)):
            if list(t.shape) != list(meta.shape) or shm.wire_dtype(t.dtype) != meta.dtype:
                raise _Mismatch(f"input {i} is {t.dtype}{list(t.shape)}, compiled for "
                                f"{kiln_pb2.DType.Name(meta.dtype)}{list(meta.shape)}")

        # Layout: inputs then outputs, each aligned.
        layout, offset = [], 0
        for t in inputs:
            layout.append(offset)
            offset += shm.align(t.numel() * t.element_size())
        out_offsets = []
        for val in ser.output_vals:
            out_offsets.append(offset)
            offset += shm.align(shm.nbytes(val.dtype, val.shape))
        region = self.conn.arena().reserve(max(offset, shm.ALIGNMENT))

        request = kiln_pb2.ExecuteRequest(session_id=self.conn.session_id, handle=self._handle)
        for t, off in zip(inputs, layout):
            request.inputs.append(region.write(off, t.detach()))
        for val, off in zip(ser.output_vals, out_offsets):
            request.outputs.append(region.descriptor(off, val.dtype, val.shape))
        self.conn.stub.Execute(request, timeout=connection_mod.EXECUTE_TIMEOUT_S)

        outputs = []
        for val, off in zip(ser.output_vals, out_offsets):
            # A fresh tensor with eager's strides: never aliases the arena.
            out = torch.empty_strided(tuple(val.shape), tuple(val.stride()), dtype=val.dtype)
            shm.copy_tensor(out, region.view(off, val.dtype, val.shape))
            outputs.append(out)
        return outputs[0] if ser.single_output else tuple(outputs)

    def close(self) -> None:
        with self._lock:
            self._release()

    def __del__(self) -> None:
        # Dropped without close() (e.g. torch._dynamo.reset()): let the
        # connection release the handle on its next compile.
        handle = getattr(self, "_handle", None)
        if handle is not None:
            self.conn.defer_release(self._generation, handle)


class _Mismatch(RuntimeError):
    """The daemon's view of the graph differs from eager's."""


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
