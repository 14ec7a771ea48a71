"""torch.compiler behaviours with backend="kiln", against the real daemon.

Each test runs the same function under a reference backend ("eager" or
"aot_eager", through Dynamo's CompileCounterWithBackend) and under "kiln",
and checks that Dynamo did the same thing (frames compiled, graph breaks,
recompiles) and that results equal eager's. backend.stats() says what the
kiln backend was handed; the daemon's own stats say what it compiled and
executed.
"""
from __future__ import annotations

import importlib.metadata

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from kiln import backend, connection


def _daemon_counts(kilnd) -> tuple[int, int]:
    """(Compile requests served, executes) so far, as the daemon counts them."""
    s = connection.get_connection(kilnd.socket).stats()
    return s.graphs_compiled + s.cache_hits, s.executes


def _counted(fn, reference: str):
    """Runs fn under a CompileCounterWithBackend(reference) and returns it."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(reference)
    fn(counter)
    torch._dynamo.reset()
    return counter


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class PrintBreak(Mlp):
    def forward(self, x):
        h = torch.relu(self.fc1(x))
        print("kiln test: graph break")  # noqa: T201 (the graph break under test)
        return self.fc2(h)


class ItemBreak(Mlp):
    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if h.sum().item() > 0:  # data-dependent branch: Dynamo breaks at .item()
            h = h * 2
        return self.fc2(h)


def _model(cls):
    torch.manual_seed(0)
    return cls().eval()


def test_list_backends_includes_kiln_through_its_entry_point(daemon_up):
    assert "kiln" in torch.compiler.list_backends()
    entry = [ep for ep in importlib.metadata.entry_points(group="torch_dynamo_backends")
             if ep.name == "kiln"]
    assert [ep.value for ep in entry] == ["kiln.backend:kiln_backend"]
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("kiln") is backend.kiln_backend


def test_fullgraph_without_graph_break_runs_in_daemon(daemon_up):
    model, x = _model(Mlp), torch.randn(4, 16)
    compiled = torch.compile(model, backend="kiln", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    s = backend.stats()
    assert s.graphs == 1 and s.nodes_in_daemon > 0 and s.nodes_in_eager == 0, s


@pytest.mark.parametrize("cls", [PrintBreak, ItemBreak])
def test_fullgraph_with_graph_break_raises_like_eager_backend(daemon_up, cls):
    model, x = _model(cls), torch.randn(4, 16)
    errors = {}
    for name in ("eager", "kiln"):
        torch._dynamo.reset()
        with pytest.raises(Exception) as info, torch.no_grad():
            torch.compile(model, backend=name, fullgraph=True)(x)
        errors[name] = info.type
    assert errors["kiln"] is errors["eager"], errors
    assert issubclass(errors["kiln"], torch._dynamo.exc.TorchDynamoException), errors
    assert backend.stats().graphs == 0, backend.stats()


@pytest.mark.parametrize("cls", [PrintBreak, ItemBreak])
def test_graph_break_gives_eager_result_with_two_graphs(daemon_up, cls, capsys):
    model, x = _model(cls), torch.randn(4, 16)
    with torch.no_grad():
        want = model(x)

        def run(counter):
            torch.testing.assert_close(torch.compile(model, backend=counter)(x), want)

        reference = _counted(run, "eager")
        kiln = _counted(run, "kiln")
    assert reference.frame_count == kiln.frame_count == 2
    assert reference.op_count == kiln.op_count
    s = backend.stats()
    # Both graphs run wholly in the daemon (ItemBreak's h.sum() included);
    # the break itself (.item(), print) is Dynamo's, between them.
    assert s.graphs == 2 and s.nodes_in_daemon > 0 and s.nodes_in_eager == 0, s
    if cls is PrintBreak:  # the print ran in eager, once per call
        assert capsys.readouterr().out.count("kiln test: graph break") == 3


def test_reset_then_recompile(daemon_up):
    model, x = _model(Mlp), torch.randn(4, 16)
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        want = model(x)
        torch.testing.assert_close(compiled(x), want)
        compiles, _ = _daemon_counts(daemon_up)
        torch.compiler.reset()
        torch.testing.assert_close(compiled(x), want)
        torch.testing.assert_close(compiled(x), want)
    assert backend.stats().graphs == 2, backend.stats()
    # The recompiled graph reaches the daemon again (a cache hit there).
    assert _daemon_counts(daemon_up)[0] == compiles + 1


def test_force_eager_stance_runs_eager_without_daemon(daemon_up):
    model = _model(Mlp)
    compiled = torch.compile(model, backend="kiln")
    x, other = torch.randn(4, 16), torch.randn(7, 16)
    with torch.no_grad():
        compiled(x)  # compiled and executed in the daemon
        before, graphs = _daemon_counts(daemon_up), backend.stats().graphs
        with torch.compiler.set_stance("force_eager"):
            # A cached graph and a shape never seen: both eager.
            torch.testing.assert_close(compiled(x), model(x))
            torch.testing.assert_close(compiled(other), model(other))
        assert _daemon_counts(daemon_up) == before
        assert backend.stats().graphs == graphs
        # Back to the default stance: the daemon runs it again.
        torch.testing.assert_close(compiled(x), model(x))
    assert _daemon_counts(daemon_up)[1] > before[1]


def test_allow_in_graph_keeps_function_in_one_graph(daemon_up):
    def scale_shift(t):
        torch._dynamo.graph_break()  # Dynamo would break here if it traced inside
        return torch.relu(t) * 2 + 1

    def fn(x, w):
        return scale_shift(x @ w).mean(dim=1)

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    want = fn(x, w)

    def run(counter):
        torch.testing.assert_close(torch.compile(fn, backend=counter)(x, w), want)

    assert _counted(run, "eager").frame_count > 1  # without allow_in_graph: broken up
    torch.compiler.allow_in_graph(scale_shift)
    try:
        reference = _counted(run, "aot_eager")
        kiln = _counted(run, "kiln")
    finally:
        torch._dynamo.disallow_in_graph(scale_shift)
    assert reference.frame_count == kiln.frame_count == 1
    assert any(n.target is scale_shift for n in kiln.graphs[0].graph.nodes)
    s = backend.stats()
    # Lowered into ATen ops that run in the daemon, like any other node.
    assert s.graphs == 1 and s.nodes_in_daemon >= 4 and s.nodes_in_eager == 0, s


class Switch(Mlp):
    def __init__(self):
        super().__init__()
        self.use_sigmoid = False

    def forward(self, x):
        h = self.fc1(x)
        h = torch.sigmoid(h) if self.use_sigmoid else torch.relu(h)
        return self.fc2(h)


def test_guard_failure_recompiles_with_right_answer(daemon_up):
    x = torch.randn(4, 16)

    def run(counter):
        model = _model(Switch)
        compiled = torch.compile(model, backend=counter)
        for flag in (False, True, False, True):
            model.use_sigmoid = flag
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), model(x))

    reference = _counted(run, "eager")
    daemon_before = _daemon_counts(daemon_up)
    kiln = _counted(run, "kiln")
    # One graph per value of the attribute; flipping back hits the cache.
    assert reference.frame_count == kiln.frame_count == 2
    s = backend.stats()
    assert s.graphs == 2 and s.nodes_in_daemon > 0 and s.nodes_in_eager == 0, s
    compiles, executes = _daemon_counts(daemon_up)
    assert compiles == daemon_before[0] + 2
    assert executes == daemon_before[1] + 4


def test_an_exported_module_runs_whole_in_the_daemon(daemon_up):
    """torch.export puts an aten._assert_tensor_metadata before each .to();
    asserting what the traced value is, it is dropped rather than left in
    eager beside the partition."""
    import kiln

    class Masked(torch.nn.Module):
        def forward(self, x, mask):
            return torch.relu(x) * mask.to(torch.float32)

    x, mask = torch.randn(4, 8), torch.randint(0, 2, (4, 8))
    exported = torch.export.export(Masked(), (x, mask), strict=True).module()
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert "aten._assert_tensor_metadata.default" in targets, targets
    with torch.no_grad():
        report = kiln.explain(exported, x, mask)
        got = torch.compile(exported, backend="kiln")(x, mask)
    assert report.nodes_in_eager == 0 and report.nodes_in_daemon >= 2, str(report)
    torch.testing.assert_close(got, torch.relu(x) * mask.float())
