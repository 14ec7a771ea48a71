"""A partition's call plan: everything a call to one compiled graph needs
that does not change between calls. Which arguments are inputs and their
expected metas, where each tensor goes in the calling thread's arena,
which outputs come back in blocks of their own (output_pool.py), the
channel's slot bytes and the native call's plan (rebuilt when the arena's
region changes), and the same call as an Execute request.

Plans are plain data over shm.Region: making and binding one talks to no
daemon. A static partition has one plan; a dynamic-shape partition one per
shape variant (shape_variants.py), its output metas taken from the
daemon's Specialize answer and checked against eager's symbolic ones.
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

import torch

from kiln import channel as channel_mod
from kiln import native, options, serialize, shm
from kiln import output_pool as output_pool_mod
from kiln.v1 import kiln_pb2


class Mismatch(RuntimeError):
    """The daemon's view of the graph differs from eager's."""


def evaluate_size(value: object, bindings: dict) -> int | None:
    """A size or stride of a (symbolic) fake value for this call, or None
    when it involves a symbol the call does not determine."""
    if not isinstance(value, torch.SymInt):
        return int(value)
    expr = value.node.expr.xreplace(bindings)
    if isinstance(expr, int):
        return expr
    return int(expr) if expr.is_number else None


def is_dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether strides lay the elements out without gaps or overlaps (in
    some dimension order)."""
    if any(size == 0 for size in shape):
        return True
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(shape, strides) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


class CallPlan:
    """Everything a call needs that does not change between calls: which
    arguments are inputs, their expected metas, where each tensor goes in
    the arena and the channel's slot bytes (rebuilt when the arena's region
    changes)."""

    # A graph whose last run took under this many microseconds is waited
    # for by spinning (for up to SPIN_US): a futex sleep and wake-up would
    # cost more than the run. Longer runs are slept through: a spinning
    # client takes the core that another client's call needs.
    SPIN_BELOW_US = 20.0
    SPIN_US = 50.0
    # A graph whose last run took at least this long is waited for with
    # PyTorch's OpenMP workers asleep when they are spinning (an eager op
    # just ran; client/native/omp_park.h): they would take a core from the
    # daemon's run, and waking them afterwards costs far less than the run.
    PARK_FROM_US = 300.0
    PARK = options.env_switch("KILN_OMP_PARK")

    def __init__(self, input_positions: Sequence[int],
                 input_metas: Sequence[tuple[torch.Size, torch.dtype]],
                 output_metas: Sequence[tuple[tuple, tuple, torch.dtype]], single_output: bool,
                 over_inputs: Mapping[int, int] | None = None):
        self.handle = 0  # the daemon handle the plan calls
        self.input_positions = list(input_positions)
        self.input_metas = list(input_metas)
        self.output_metas = list(output_metas)
        self.single_output = single_output
        # output -> input: the output is that input's updated value, which
        # the daemon may compute over the input's own bytes when they lie in
        # an output block (Graph.outputs_over_inputs).
        self.over_inputs = dict(over_inputs or {})
        self.num_inputs = len(self.input_metas)
        self.num_outputs = len(self.output_metas)
        offsets, offset = [], 0
        for shape, dtype in self.input_metas:
            offsets.append(offset)
            offset += shm.align(shm.nbytes(dtype, shape))
        # Outputs returned in blocks of their own (output_pool.py) take no
        # room in the arena.
        self.pooled_outputs = [
            i for i, (shape, stride, dtype) in enumerate(self.output_metas)
            if output_pool_mod.eligible(dtype, shape,
                                        list(stride) == shm.contiguous_strides(shape))]
        self.output_offsets = []
        for i, (shape, _, dtype) in enumerate(self.output_metas):
            self.output_offsets.append(offset)
            if i not in self.pooled_outputs:
                offset += shm.align(shm.nbytes(dtype, shape))
        self.input_offsets = offsets
        # Inputs large enough to be an output handed back in a block of its
        # own, which a call then reads in place (output_pool.locate).
        self.input_nbytes = [shm.nbytes(dtype, shape) for shape, dtype in self.input_metas]
        self.large_inputs = [i for i, n in enumerate(self.input_nbytes)
                             if n >= output_pool_mod.MIN_BYTES]
        self.total_bytes = max(offset, shm.ALIGNMENT)
        self.slot_list: list[tuple[int, int, int]] = []
        self.region: shm.Region | None = None
        self.input_views: list[torch.Tensor] = []
        self.output_views: list[torch.Tensor] = []
        self.output_dense: list[tuple[int, int] | None] = []
        self.slots = b""
        self.native_plan: bytes | None = None

    @classmethod
    def for_static(cls, ser: serialize.SerializedGraph,
                   over_inputs: Mapping[int, int] | None = None) -> "CallPlan":
        # Outputs get eager's strides, unless those overlap (an expanded
        # view, as backward graphs return): then dense, with the same values.
        outputs = [
            (tuple(v.shape),
             tuple(v.stride()) if is_dense(v.shape, v.stride())
             else tuple(shm.contiguous_strides(v.shape)), v.dtype)
            for v in ser.output_vals]
        return cls(ser.tensor_positions,
                   [(torch.Size(m.shape), shm.torch_dtype(m.dtype)) for m in ser.input_metas],
                   outputs, ser.single_output, over_inputs)

    @classmethod
    def for_variant(cls, ser: serialize.SerializedGraph, args: Sequence[object],
                    response: kiln_pb2.CompileResponse, bindings: dict,
                    over_inputs: Mapping[int, int] | None = None) -> "CallPlan":
        """The plan of one shape variant: input metas from the call, output
        shapes from the daemon, checked against eager's symbolic ones where
        the call's sizes determine them; strides are eager's evaluated the
        same way (else contiguous)."""
        if len(response.outputs) != len(ser.output_vals):
            raise Mismatch(f"daemon reports {len(response.outputs)} outputs, "
                           f"expected {len(ser.output_vals)}")
        outputs = []
        for i, (meta, val) in enumerate(zip(response.outputs, ser.output_vals)):
            shape = tuple(meta.shape)
            want = [evaluate_size(d, bindings) for d in val.shape]
            if (meta.dtype != shm.wire_dtype(val.dtype) or len(want) != len(shape)
                    or any(w is not None and w != got for w, got in zip(want, shape))):
                raise Mismatch(f"output {i}: daemon infers {kiln_pb2.DType.Name(meta.dtype)}"
                               f"{list(shape)}, eager gives {val.dtype}{want}")
            strides = [evaluate_size(st, bindings) for st in val.stride()]
            if any(st is None for st in strides) or not is_dense(shape, strides):
                strides = shm.contiguous_strides(shape)
            outputs.append((shape, tuple(strides), val.dtype))
        inputs = [(torch.Size(args[i].shape), args[i].dtype) for i in ser.tensor_positions]
        return cls(ser.tensor_positions, inputs, outputs, ser.single_output, over_inputs)

    def take_inputs(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [args[i] for i in self.input_positions]

    def bind(self, region: shm.Region) -> None:
        self.region = region
        # (source address, bytes) of outputs whose eager strides are
        # contiguous, else None (copied with strides).
        self.output_dense = [
            (region.address + off, shm.nbytes(dtype, shape))
            if list(stride) == shm.contiguous_strides(shape) else None
            for off, (shape, stride, dtype) in zip(self.output_offsets, self.output_metas)]
        self.input_views = [region.view(off, dtype, shape)
                            for off, (shape, dtype) in zip(self.input_offsets, self.input_metas)]
        self.output_views = [None if i in self.pooled_outputs else region.view(off, dtype, shape)
                             for i, (off, (shape, _, dtype)) in enumerate(zip(
                                 self.output_offsets, self.output_metas))]
        slots = [(region.region_id, off, shm.nbytes(dtype, shape))
                 for off, (shape, dtype) in zip(self.input_offsets, self.input_metas)]
        slots += [(region.region_id, off, shm.nbytes(dtype, shape))
                  for off, (shape, _, dtype) in zip(self.output_offsets, self.output_metas)]
        self.slot_list = slots
        self.slots = channel_mod.pack_slots(slots)
        self.native_plan = self._native_plan(region)

    def _native_plan(self, region: shm.Region) -> bytes | None:
        """native.channel_call's plan, when it can make these calls: every
        output copied densely out of the arena (none pooled)."""
        if (native.channel_call is None or self.pooled_outputs
                or not all(self.output_dense)):
            return None
        inputs = [(pos, region.address + off, shm.nbytes(dtype, shape), dtype, tuple(shape))
                  for pos, off, (shape, dtype) in zip(self.input_positions, self.input_offsets,
                                                      self.input_metas)]
        outputs = [(address, nbytes, dtype, shape, stride)
                   for (address, nbytes), (shape, stride, dtype) in zip(self.output_dense,
                                                                        self.output_metas)]
        return native.pack_plan(shm.STREAM_COPY_MIN_BYTES, inputs, outputs, self.slots)

    def spin_s(self, last_run_us: float) -> float:
        return self.SPIN_US * 1e-6 if 0 < last_run_us < self.SPIN_BELOW_US else 0.0

    def park(self, last_run_us: float) -> bool:
        return self.PARK and last_run_us >= self.PARK_FROM_US

    def request(self, session_id: str, handle: int, blocks: Mapping[int, shm.Region],
                in_place: Mapping[int, tuple[shm.Region, int]] | None = None,
                over: Mapping[int, tuple[shm.Region, int]] | None = None
                ) -> kiln_pb2.ExecuteRequest:
        """The same call as an Execute RPC (when channels are unavailable);
        outputs in `blocks` go to offset 0 of their block, inputs in
        `in_place` are read where they lie and outputs in `over` written
        there."""
        assert self.region is not None
        in_place, over = in_place or {}, over or {}
        request = kiln_pb2.ExecuteRequest(session_id=session_id, handle=handle)
        for i, (off, (shape, dtype)) in enumerate(zip(self.input_offsets, self.input_metas)):
            region, off = in_place.get(i, (self.region, off))
            request.inputs.append(region.descriptor(off, dtype, shape))
        for i, (off, (shape, _, dtype)) in enumerate(zip(self.output_offsets,
                                                          self.output_metas)):
            if i in over:
                request.outputs.append(over[i][0].descriptor(over[i][1], dtype, shape))
            elif i in blocks:
                request.outputs.append(blocks[i].descriptor(0, dtype, shape))
            else:
                request.outputs.append(self.region.descriptor(off, dtype, shape))
        return request

    def inputs_in_place(self, pool: output_pool_mod.OutputPool | None,
                        inputs: Sequence[torch.Tensor]) -> dict[int, tuple[shm.Region, int]]:
        """{input index: (block, offset)} of the inputs that lie in blocks of
        `pool` (earlier calls' outputs): the call reads them there."""
        if pool is None or not self.large_inputs:
            return {}
        found = {}
        for i in self.large_inputs:
            where = pool.locate(inputs[i], self.input_nbytes[i])
            if where is not None:
                found[i] = where
        return found

    def outputs_over(self, in_place: Mapping[int, tuple[shm.Region, int]]
                     ) -> dict[int, tuple[shm.Region, int]]:
        """{output: (block, offset)} of the outputs laid over their inputs
        this call: those whose input lies in an output block."""
        return {o: in_place[i] for o, i in self.over_inputs.items() if i in in_place}

    def call_slots(self, blocks: Mapping[int, shm.Region],
                   in_place: Mapping[int, tuple[shm.Region, int]],
                   over: Mapping[int, tuple[shm.Region, int]] | None = None) -> bytes:
        """The call's slot bytes: the plan's, with outputs in `blocks` at
        offset 0 of their block, inputs in `in_place` read where they lie
        and outputs in `over` written there."""
        if not blocks and not in_place:
            return self.slots
        slots = list(self.slot_list)
        for i, (block, offset) in in_place.items():
            slots[i] = (block.region_id, offset, slots[i][2])
        for i, block in blocks.items():
            slots[self.num_inputs + i] = (block.region_id, 0, slots[self.num_inputs + i][2])
        for i, (block, offset) in (over or {}).items():
            slots[self.num_inputs + i] = (block.region_id, offset, slots[self.num_inputs + i][2])
        return channel_mod.pack_slots(slots)

    def acquire_blocks(self, pool: output_pool_mod.OutputPool,
                       skip: Collection[int] = ()) -> dict[int, shm.Region]:
        """A block per pooled output but those in `skip`."""
        blocks: dict = {}
        try:
            for i in (i for i in self.pooled_outputs if i not in skip):
                shape, _, dtype = self.output_metas[i]
                blocks[i] = pool.acquire(shm.nbytes(dtype, shape))
        except OSError as e:
            for block in blocks.values():
                pool.give_back(block)
            shape, _, dtype = self.output_metas[i]
            raise RuntimeError(
                f"kiln: no room in /dev/shm for a {shm.nbytes(dtype, shape) >> 20} MiB output "
                f"({e}); give /dev/shm more space (in a container: --shm-size)") from e
        return blocks
