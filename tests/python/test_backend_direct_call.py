"""A graph that is one daemon partition is called without its GraphModule.

kiln.backend.CompiledGraph calls the partition's forward directly when the
split graph is inputs -> one partition -> output; the results must be what
the split GraphModule returns (same values, same structure, inputs passed
through as themselves), and any other graph shape keeps the GraphModule.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from kiln import backend


class _TwoOutputsAndAnInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x, y):
        h = self.linear(x).relu()
        return h * 2, y, h - y


def test_one_partition_is_called_directly_with_the_split_graphs_results(daemon_up):
    torch.manual_seed(0)
    model = _TwoOutputsAndAnInput().eval()
    graphs: list[backend.CompiledGraph] = []

    def both_paths(gm, example_inputs):
        """Runs the direct call and the split GraphModule side by side and
        returns the direct call's results once they are checked equal."""
        compiled = backend.compile_for_torch(gm, example_inputs, None)
        graphs.append(compiled)

        def run(*args):
            direct, split = compiled(*args), compiled.split(*args)
            assert type(direct) is type(split) and len(direct) == len(split)
            for d, s in zip(direct, split):
                assert torch.equal(d, s)
            return direct
        return run

    inputs = (torch.randn(4, 8), torch.randn(4, 8))
    with torch.no_grad():
        got = torch.compile(model, backend=both_paths)(*inputs)
        want = model(*inputs)
    assert len(graphs) == 1 and graphs[0]._run is not graphs[0].split
    assert len(got) == 3
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert got[1] is inputs[1]


def test_a_graph_split_around_eager_nodes_keeps_its_graph_module(daemon_up):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    x = torch.randn(2, 8)
    graphs: list[backend.CompiledGraph] = []

    def capture(gm, example_inputs):
        graphs.append(backend.compile_for_torch(gm, example_inputs,
                                                options={"disabled_ops": ["aten.relu"],
                                                         "min_partition_size": 1}))
        return graphs[-1]

    with torch.no_grad():
        got = torch.compile(model, backend=capture)(x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    assert graphs[0]._run is graphs[0].split
