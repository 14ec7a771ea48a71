"""Client and daemon threads taking turns on a model with eager nodes
between its partitions (client/kiln/backend.py's _eager_compute_follows,
the channel's client-computes-next flag, client/native/omp_park.h).
bench/server/interleaved.py measures what they save."""
from __future__ import annotations

import pytest
import torch

from kiln import backend, native

pytestmark = pytest.mark.usefixtures("daemon_up")


class Interleaved(torch.nn.Module):
    """conv, bn, relu (daemon) | logcumsumexp (eager) | conv (daemon) |
    logcumsumexp (eager) | mean (daemon): three partitions, the first two
    followed by eager compute."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        h = torch.logcumsumexp(torch.relu(self.bn(self.conv1(x))), 1)
        h = torch.logcumsumexp(self.conv2(h), 1)
        return h.mean(dim=(2, 3))


def _compiled_with_records(model, x):
    records: list[backend.GraphRecord] = []
    token = backend.graph_recorder.set(records.append)
    try:
        compiled = torch.compile(model, backend="kiln")
        out = compiled(x)
    finally:
        backend.graph_recorder.reset(token)
    return compiled, out, records


def test_partitions_followed_by_eager_compute_say_so_and_answers_stay_exact():
    torch.manual_seed(0)
    model, x = Interleaved().eval(), torch.randn(1, 16, 24, 24)
    with torch.no_grad():
        expected = model(x)
        compiled, out, records = _compiled_with_records(model, x)
        torch.testing.assert_close(out, expected)
        (record,) = records
        flags = [sub.client_computes_next for sub in record.subgraphs]
        assert flags == [True, True, False], flags
        for _ in range(3):  # the flagged calls, through the channel, again
            torch.testing.assert_close(compiled(x), expected)


def test_a_partition_whose_results_only_pass_through_views_is_not_flagged():
    class ViewsBetween(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3)

        def forward(self, x):
            return torch.logcumsumexp(self.conv(x), 1).flatten(1)

    torch.manual_seed(1)
    model, x = ViewsBetween().eval(), torch.randn(1, 4, 10, 10)
    with torch.no_grad():
        _, out, records = _compiled_with_records(model, x)
        torch.testing.assert_close(out, model(x))
    (record,) = records
    # conv (daemon) | logcumsumexp (eager) | a view to the output: one
    # partition, and eager compute follows it.
    assert [sub.client_computes_next for sub in record.subgraphs] == [True]


@pytest.mark.skipif(native.parked_calls is None, reason="no native client helpers")
def test_openmp_workers_spinning_after_an_eager_op_sleep_through_a_long_call():
    if torch.get_num_threads() < 2:
        pytest.skip("needs PyTorch on 2 or more threads")
    torch.manual_seed(2)
    # A partition long enough to be waited for with the workers parked
    # (CallPlan.PARK_FROM_US) right after an eager op that ran on every
    # thread: its OpenMP workers spin for a while after it.
    model = torch.nn.Sequential(*[torch.nn.Conv2d(64, 64, 3, padding=1) for _ in range(4)]).eval()
    x = torch.randn(1, 64, 56, 56)
    big = torch.randn(1 << 22)
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="kiln")
        for _ in range(3):  # compile, then calls that record the run time
            compiled(x)
        before = native.parked_calls()
        for _ in range(5):
            torch.exp(big)  # parallel over all threads, right before the call
            torch.testing.assert_close(compiled(x), expected)
    # A spinning worker is one in state R: on a busy host it may have been
    # switched out and back, but never asleep within the spin window every
    # time; one parked call out of five shows the mechanism works.
    assert native.parked_calls() > before
