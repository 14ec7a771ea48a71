"""Point 2: what a kernel addresses memory with is read once, out of the
client's reach, and a call cannot lay its outputs over its inputs.

Indices live in the client's shared memory. A second thread flips one of
them between a valid row and one far outside the table while the daemon
runs an embedding or a gather: the call either fails with an out-of-range
error or computes with one consistent snapshot of the indices; it never
reads outside the table. And a call whose outputs share bytes with an
input or another output (in one region, or through the same object
registered twice) is refused before it runs.
"""
from __future__ import annotations

import threading

import grpc
import pytest
import torch

from conftest import call, graph, placeholder, relu_graph
from kiln import shm
from kiln.v1 import kiln_pb2

COUNT = 1 << 18   # indices per call
ROWS, DIM = 16, 16
FAR = 1 << 40     # an index far past the table: reading there faults or leaks


def _meta(dtype, shape):
    return shm.tensor_meta(dtype, shape)


def _int_arg(value: int) -> kiln_pb2.Argument:
    return kiln_pb2.Argument(int_value=value)


def _race(client, handle, region, inputs, out_desc, index_view, valid_value):
    """Runs the call while a thread flips index_view[0] between valid_value
    and FAR; returns the indices' first element as the daemon must have
    seen it (valid_value), or None when the call was refused."""
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            index_view[0] = FAR
            index_view[0] = valid_value

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        client.execute(handle, inputs, [out_desc])
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
        assert "out of range" in e.details(), e.details()
        return None
    finally:
        stop.set()
        flipper.join()
    return valid_value


def test_embedding_indices_flipped_mid_run_never_read_outside_the_table(
        kilnd, bystander, hostile):
    g = graph([placeholder("weight", _meta(torch.float32, (ROWS, DIM))),
               placeholder("indices", _meta(torch.int64, (COUNT,))),
               call("embedding", "aten.embedding.default", 0, 1)], [2])
    handle = hostile.compile(g).handle
    weight = torch.randn(ROWS, DIM)
    indices = torch.randint(0, ROWS, (COUNT,))
    indices[0] = 3
    region = hostile.region(4096 + COUNT * 8)
    out_region = hostile.region(COUNT * DIM * 4)
    inputs = [region.write(0, weight), region.write(4096, indices)]
    index_view = region.view(4096, torch.int64, (COUNT,))
    out = out_region.descriptor(0, torch.float32, (COUNT, DIM))
    for _ in range(20):
        if _race(hostile, handle, region, inputs, out, index_view, 3) is not None:
            got = out_region.view(0, torch.float32, (COUNT, DIM))
            assert torch.equal(got, weight[indices])
    assert kilnd.alive(), f"kilnd {kilnd.exit_description()}:\n{kilnd.log()}"


def test_gather_indices_flipped_mid_run_never_read_outside_the_source(
        kilnd, bystander, hostile):
    g = graph([placeholder("self", _meta(torch.float32, (ROWS, COUNT))),
               placeholder("index", _meta(torch.int64, (1, COUNT))),
               call("gather", "aten.gather.default", 0, _int_arg(0), 1)], [2])
    handle = hostile.compile(g).handle
    source = torch.randn(ROWS, COUNT)
    index = torch.randint(0, ROWS, (1, COUNT))
    index[0, 0] = 5
    region = hostile.region(ROWS * COUNT * 4 + COUNT * 8 + 4096)
    out_region = hostile.region(COUNT * 4)
    inputs = [region.write(0, source), region.write(ROWS * COUNT * 4, index)]
    index_view = region.view(ROWS * COUNT * 4, torch.int64, (COUNT,))
    out = out_region.descriptor(0, torch.float32, (1, COUNT))
    for _ in range(20):
        if _race(hostile, handle, region, inputs, out, index_view, 5) is not None:
            got = out_region.view(0, torch.float32, (1, COUNT))
            assert torch.equal(got, torch.gather(source, 0, index))
    assert kilnd.alive(), f"kilnd {kilnd.exit_description()}:\n{kilnd.log()}"


def _assert_overlap_refused(call_fn) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call_fn()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (
        info.value.code(), info.value.details())
    assert "shares memory" in info.value.details(), info.value.details()


def test_output_laid_over_an_input_is_refused(kilnd, bystander, hostile):
    handle = hostile.compile(relu_graph((64, 64))).handle
    region = hostile.region(1 << 16)
    inp = region.write(0, torch.randn(64, 64))
    # Exactly over the input, and one element into it.
    _assert_overlap_refused(lambda: hostile.execute(handle, [inp], [inp]))
    partly = region.descriptor(16384 - 4, torch.float32, (64, 64))
    _assert_overlap_refused(lambda: hostile.execute(handle, [inp], [partly]))
    # Right after it is fine.
    after = region.descriptor(16384, torch.float32, (64, 64))
    hostile.execute(handle, [inp], [after])


def test_same_object_registered_twice_is_one_object(kilnd, bystander, hostile):
    handle = hostile.compile(relu_graph((64, 64))).handle
    region = hostile.region(1 << 16)
    inp = region.write(0, torch.randn(64, 64))
    first_id = region.region_id
    region.register()  # the same /dev/shm object, mapped again under a new id
    assert region.region_id != first_id
    alias = region.descriptor(0, torch.float32, (64, 64))
    _assert_overlap_refused(lambda: hostile.execute(handle, [inp], [alias]))


def test_two_outputs_sharing_bytes_are_refused(kilnd, bystander, hostile):
    g = graph([placeholder("x", _meta(torch.float32, (64, 64))),
               call("relu", "aten.relu.default", 0),
               call("sigmoid", "aten.sigmoid.default", 0)], [1, 2])
    handle = hostile.compile(g).handle
    region = hostile.region(1 << 16)
    inp = region.write(0, torch.randn(64, 64))
    out = region.descriptor(16384, torch.float32, (64, 64))
    _assert_overlap_refused(lambda: hostile.execute(handle, [inp], [out, out]))


def _relu_over_input(shape, inputs: int = 1) -> kiln_pb2.Graph:
    """relu(x) declared as x's update (Graph.outputs_over_inputs); with two
    inputs, y is another input the graph adds."""
    nodes = [placeholder("x", _meta(torch.float32, shape))]
    if inputs == 2:
        nodes += [placeholder("y", _meta(torch.float32, shape)),
                  call("relu", "aten.relu.default", 0), call("add", "aten.add.Tensor", 2, 1)]
        g = graph(nodes, [3])
    else:
        g = graph(nodes + [call("relu", "aten.relu.default", 0)], [1])
    g.outputs_over_inputs.add(output=0, input=0)
    return g


def test_an_output_declared_over_an_input_covers_it_exactly_or_is_refused(
        kilnd, bystander, hostile):
    handle = hostile.compile(_relu_over_input((64, 64))).handle
    region = hostile.region(1 << 16)
    x = torch.randn(64, 64)
    inp = region.write(0, x)
    hostile.execute(handle, [inp], [inp])  # updated where it lies
    assert torch.equal(region.view(0, torch.float32, (64, 64)), torch.relu(x))
    # Anything but exactly over it is refused, as for any graph.
    for offset in (4, 16384 - 4):
        partly = region.descriptor(offset, torch.float32, (64, 64))
        _assert_overlap_refused(lambda: hostile.execute(handle, [inp], [partly]))
    # Another input sharing its bytes would be rewritten mid-run: refused.
    handle2 = hostile.compile(_relu_over_input((64, 64), inputs=2)).handle
    y = region.descriptor(8192, torch.float32, (64, 64))
    _assert_overlap_refused(lambda: hostile.execute(handle2, [inp, y], [inp]))
    # Declarations that do not fit the graph are refused at compile.
    for output, input_ in ((1, 0), (0, 1), (-1, 0)):
        bad = _relu_over_input((64, 64))
        bad.outputs_over_inputs[0].output = output
        bad.outputs_over_inputs[0].input = input_
        with pytest.raises(grpc.RpcError) as info:
            hostile.compile(bad)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert kilnd.alive(), f"kilnd {kilnd.exit_description()}:\n{kilnd.log()}"
