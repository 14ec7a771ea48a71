"""kiln/precompiled.py without a daemon: a graph saved for torch's
precompile comes back with the same nodes, names, targets and arguments
(the lowering cache's key is the same), including targets that do not
pickle; one calling what cannot be found again by name is not saved."""
from __future__ import annotations

import pickle

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from kiln import precompiled
from kiln.lowering_key import _graph_text


def _model(x, w, b):
    y = torch.conv2d(x, w, b, padding=1)
    y = F.max_pool2d(y, 2)  # a boolean_dispatch function: does not pickle
    y = F.batch_norm(y, None, None, training=True)
    return y.flatten(1)[:, ::2].relu() + torch.ones(1)


def _traced() -> fx.GraphModule:
    gm = fx.symbolic_trace(_model)
    for node in gm.graph.nodes:  # metadata a traced graph carries; not saved
        node.meta["stack_trace"] = "somewhere"
    return gm


def test_a_graph_comes_back_as_it_was():
    gm = _traced()
    back = precompiled._graph_from_state(precompiled._graph_state(gm))
    assert _graph_text(back) == _graph_text(gm)
    assert [n.name for n in back.graph.nodes] == [n.name for n in gm.graph.nodes]
    assert all(not n.meta for n in back.graph.nodes)
    x, w, b = torch.randn(1, 2, 8, 8), torch.randn(3, 2, 3, 3), torch.randn(3)
    torch.testing.assert_close(back(x, w, b), gm(x, w, b))


def test_a_whole_function_round_trips_with_its_weight_positions_and_options():
    gm = _traced()
    fn = precompiled.KilnCompiledFunction(None, gm, frozenset({1, 2}), {"precision": "f32"})
    data = precompiled.KilnCompiledFunction.serialize_compile_artifacts(fn)
    back = precompiled.KilnCompiledFunction.deserialize_compile_artifacts(data)
    assert back._constant_inputs == frozenset({1, 2})
    assert back._options == {"precision": "f32"}
    assert back._compiled is None  # compiled at its first call
    assert _graph_text(back._graph) == _graph_text(gm)


def test_a_target_not_found_by_its_name_is_not_saved():
    def local_op(x):
        return x + 1
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(local_op, (x,)))
    with pytest.raises(RuntimeError, match="not found again by its name"):
        precompiled._graph_state(fx.GraphModule(torch.nn.Module(), graph))


def test_a_saved_graph_of_another_format_is_refused():
    with pytest.raises(RuntimeError, match="format 0"):
        precompiled.KilnCompiledFunction.deserialize_compile_artifacts(
            pickle.dumps({"format": 0}))
