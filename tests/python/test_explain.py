"""kiln.explain against the real daemon: what ran where, each fallback's
reason, partitions and constant bytes uploaded vs reused."""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import kiln
from kiln import connection

# Not in the daemon's op list (checked against its capabilities below).
UNSUPPORTED = "aten.logcumsumexp.default"


class ConvLogcumsumexp(torch.nn.Module):
    """conv -> relu | logcumsumexp (eager) | mean -> linear: two daemon partitions."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.logcumsumexp(torch.relu(self.conv(x)), 1)
        return self.fc(h.mean(dim=(2, 3)))


def _model(seed: int, cls=ConvLogcumsumexp):
    torch.manual_seed(seed)  # weights no other test uploads
    return cls().eval()


def _weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _by_target(report) -> dict[str, str]:
    return {f.target: f.reason for f in report.fallbacks}


def test_unsupported_op_stays_in_eager_with_its_reason(daemon_up):
    ops = {op.target for op in connection.get_connection(daemon_up.socket).capabilities().ops}
    assert UNSUPPORTED not in ops, "the daemon supports it now: pick another op for this test"
    model, x = _model(1), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        report = kiln.explain(model, x)
        torch.testing.assert_close(report.output, model(x))
    assert report.dynamo_graphs == 1 and len(report.graphs) == 1 and not report.graph_breaks
    (graph,) = report.graphs
    assert graph.eager_reason == ""
    assert _by_target(report) == {UNSUPPORTED: "unsupported op"}
    # conv, relu | logcumsumexp | mean, permute (t), addmm: a partition on each side.
    assert report.partitions == 2 and all(p.in_daemon for p in graph.partitions)
    assert graph.nodes_in_eager == 1 and graph.nodes_in_daemon >= 4
    assert graph.nodes == graph.nodes_in_daemon + graph.nodes_in_eager
    assert sum(p.nodes for p in graph.partitions) == graph.nodes_in_daemon
    text = str(report)
    assert "eager [unsupported op]: logcumsumexp (aten.logcumsumexp.default)" in text, text
    assert "2 partition(s)" in text, text


def test_disabled_ops_reported_as_disabled_by_option(daemon_up):
    model, x = _model(2), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        plain = kiln.explain(model, x)
        disabled = kiln.explain(model, x, disabled_ops=["aten.relu", "aten.addmm.default"])
        torch.testing.assert_close(disabled.output, model(x))
    reasons = _by_target(disabled)
    assert reasons == {UNSUPPORTED: "unsupported op", "aten.relu.default": "disabled by option",
                       "aten.addmm.default": "disabled by option"}, reasons
    assert disabled.nodes_in_daemon == plain.nodes_in_daemon - 2
    assert "eager [disabled by option]: relu (aten.relu.default), addmm" in str(disabled)


def test_constant_bytes_uploaded_then_reused(daemon_up):
    model, x = _model(3), torch.randn(1, 3, 8, 8)
    weights = _weight_bytes(model)
    with torch.no_grad():
        first = kiln.explain(model, x)
        second = kiln.explain(model, x)
    # conv weight and bias in one partition, linear weight and bias in the other.
    assert (first.constants.uploaded, first.constants.uploaded_bytes) == (4, weights)
    assert (first.constants.reused, first.constants.reused_bytes) == (0, 0)
    assert sorted(p.constants.uploaded for p in first.graphs[0].partitions) == [2, 2]
    assert (second.constants.uploaded, second.constants.uploaded_bytes) == (0, 0)
    assert (second.constants.reused, second.constants.reused_bytes) == (4, weights)
    assert f"4 uploaded ({weights / 1024:.1f} KiB)" in str(first), str(first)


def test_dtype_the_daemon_lacks(daemon_up):
    model, x = _model(4).double(), torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        report = kiln.explain(model, x)
        torch.testing.assert_close(report.output, model(x))
    reasons = _by_target(report)
    assert reasons.pop(UNSUPPORTED) == "unsupported op"
    # The compute ops lack f64; the views between them could move f64 but
    # are too few to be worth a partition of their own.
    for target in ("aten.convolution.default", "aten.relu.default", "aten.mean.dim",
                   "aten.addmm.default"):
        assert reasons.pop(target) == "dtype float64 not supported", target
    assert set(reasons.values()) <= {"partition too small (min_partition_size)"}, reasons
    assert report.nodes_in_daemon == 0 and report.partitions == 0


class ConvBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def test_daemon_compile_error_is_reported(daemon_up):
    # Batch norm in training mode passes the partitioner (the op is listed)
    # but the daemon refuses it at compile time.
    model, x = _model(5, ConvBatchNorm).train(), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        report = kiln.explain(model, x)
    rejected = [f for f in report.fallbacks if f.target == "aten.native_batch_norm.default"]
    assert len(rejected) == 1, report.fallbacks
    assert rejected[0].reason.startswith("rejected by the daemon: UNIMPLEMENTED"), rejected
    assert "training=True" in rejected[0].reason
    assert report.nodes_in_daemon > 0  # conv and relu still in the daemon
    assert "rejected by the daemon: UNIMPLEMENTED" in str(report)


def test_graph_needing_autograd_and_graph_breaks(daemon_up):
    model = _model(6)

    def fn(x):
        h = model.conv(x)
        print("kiln explain test: graph break")  # noqa: T201
        return h.relu()

    x = torch.randn(1, 3, 8, 8)
    report = kiln.explain(fn, x)  # grad enabled, conv weight requires grad
    torch.testing.assert_close(report.output, fn(x))
    assert report.dynamo_graphs == 2 and len(report.graph_breaks) == 1, report.graph_breaks
    assert "print" in report.graph_breaks[0]
    assert "needs autograd" in report.graphs[0].eager_reason
    assert report.graphs[0].nodes_in_daemon == 0 and report.graphs[0].nodes_in_eager > 0
    # The second graph (relu of a tensor that needs grad) is in eager too.
    assert all(g.eager_reason for g in report.graphs)
    assert "graph break: " in str(report) and "runs in eager: " in str(report)


def test_aot_autograd_option(daemon_up):
    model, x = _model(7), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        report = kiln.explain(model, x, aot_autograd=True)
        torch.testing.assert_close(report.output, model(x))
    assert _by_target(report) == {UNSUPPORTED: "unsupported op"}
    assert report.partitions == 2 and report.constants.uploaded_bytes == _weight_bytes(model)


def test_bad_option_is_an_error(daemon_up):
    with pytest.raises(Exception, match="no_such_option"):
        kiln.explain(_model(8), torch.randn(1, 3, 8, 8), no_such_option=1)


def test_resets_dynamo_before_and_after(daemon_up):
    model, x = _model(9), torch.randn(1, 3, 8, 8)
    counter = CompileCounterWithBackend("kiln")
    compiled = torch.compile(model, backend=counter)
    with torch.no_grad():
        compiled(x)
        kiln.explain(model, x)
        compiled(x)  # its cached graph went with the reset: compiled again
    assert counter.frame_count == 2


def test_kiln_explain_stays_the_function_after_importing_its_module():
    import kiln.explanation
    assert kiln.explain is kiln.explanation.explain and callable(kiln.explain)


def _native_bf16() -> bool:
    with open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags")).split()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def test_precision_auto_says_which_precision_the_daemon_chose(daemon_up):
    model, x = _model(7), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        report = kiln.explain(model, x, config={"precision": "auto"})
        want = model(x)
    chosen = "precision=bf16 (auto)" if _native_bf16() else "precision=f32 (auto: no native bf16)"
    assert all(chosen in p.options for g in report.graphs for p in g.partitions), report
    assert chosen in str(report)
    # bf16 products with f32 accumulation on these sizes: within 2e-2 of eager.
    torch.testing.assert_close(report.output, want, rtol=2e-2, atol=2e-2)
    with torch.no_grad():
        plain = kiln.explain(model, x)
    assert all("precision=f32 " in p.options for g in plain.graphs for p in g.partitions)
