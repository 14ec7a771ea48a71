"""Kiln against PyTorch's OpInfo database, on a bounded sample (the whole
database runs from bench/opinfo/run.py; tests/testing/opinfo.py has the
checks and their tolerance).

For every op of the sample, its first fp32 CPU samples compiled with
backend="kiln" must equal eager's answer (no mismatch, no error where
eager runs). Ops listed in opinfo_in_daemon.txt (written by the last full
run, `bench/opinfo/run.py --in-daemon-list`) must still run wholly in the
daemon: an op that falls back to eager after a change is a regression.

The sample: every SAMPLE_STRIDE-th op of the database in name order, the
listed ops among them and the others, plus ops that once gave wrong
answers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

opinfo = pytest.importorskip("testing.opinfo")
pytest.importorskip("expecttest")  # torch.testing._internal needs it

SAMPLE_STRIDE = 9
SAMPLES_PER_OP = 3

# Ops that once gave a wrong answer through Kiln, checked every run.
ONCE_WRONG = (
    "nn.functional.pad.circular",  # a decomposition writing into views of an empty tensor
)

IN_DAEMON = frozenset(
    line.strip() for line in (Path(__file__).parent / "opinfo_in_daemon.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#"))


def _sample() -> list[str]:
    names = sorted(opinfo.op_db())
    picked = names[::SAMPLE_STRIDE]
    return sorted(set(picked) | set(ONCE_WRONG))


def test_the_in_daemon_list_names_opinfo_ops():
    unknown = sorted(IN_DAEMON - set(opinfo.op_db()))
    assert not unknown, f"not OpInfo ops (renamed in torch?): {unknown}"


@pytest.mark.parametrize("name", _sample())
def test_opinfo_samples_give_eagers_answer(daemon_up, name):
    result = opinfo.check_op(opinfo.op_db()[name], SAMPLES_PER_OP)
    bad = [f"sample {s.index}: {s.outcome}: {s.detail}" for s in result.samples
           if s.outcome in ("mismatch", "error")]
    assert not bad, "\n".join(bad)
    if name in IN_DAEMON:
        eager = [f"sample {s.index}: {', '.join(s.eager_ops)} ({'; '.join(s.reasons)})"
                 for s in result.samples if s.outcome == "eager"]
        assert not eager, (
            f"{name} ran wholly in the daemon in the last full run and no longer does:\n"
            + "\n".join(eager))
