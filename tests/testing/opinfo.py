"""Kiln against PyTorch's OpInfo database: every fp32 CPU sample of an op,
compiled with backend="kiln", must give eager's answer; and it either ran
wholly in the daemon or left nodes in eager (which ones, and why).

Used by the bounded conformance test that CI runs
(tests/python/test_opinfo_conformance.py) and by the full sweep over the
database (bench/opinfo/run.py, which writes bench/opinfo/RESULTS.md).

A sample is compiled as a function of its tensors: every tensor of the
sample's input, arguments and keyword arguments is a graph input (so
nothing is constant-folded), everything else is baked in as Dynamo would
bake a Python value.

Outcomes of a sample:
  daemon     equal to eager, every ATen node ran in the daemon
  eager      equal to eager, some nodes ran in eager (Kiln fell back)
  empty      equal to eager, the graph had no op node (nothing to run)
  mismatch   differs from eager beyond the tolerance: a wrong answer
  error      compiling or running through Kiln raised where eager did not
  skipped    eager itself raises, or two eager runs disagree (random ops)

An op runs wholly in the daemon when at least one of its samples ran in the
daemon and none ran in eager or failed.

Samples are compiled with min_partition_size=0: a graph that only views
or reshapes its input stays in eager by default (eager views copy
nothing, a round trip to the daemon costs more than it saves), which says
nothing about whether the daemon runs the op. Ops whose results are undefined (the values of
torch.empty and its kin) are skipped: nothing can be compared.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Sequence

import torch
import torch.utils._pytree as pytree

# Tolerance of "equal to eager" (torch.testing.assert_close's semantics):
# fp32 kernels that vectorize, block or sum in another order than ATen
# differ by a few ulps; a wrong answer differs by far more.
RTOL = 1e-4
ATOL = 1e-5

OUTCOMES = ("daemon", "eager", "empty", "mismatch", "error", "skipped")

# Ops that return uninitialized memory: no answer to compare.
UNDEFINED_RESULTS = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided",
                               "new_empty", "new_empty_strided"})

# Options of every compile (see the module doc).
OPTIONS = {"min_partition_size": 0}


@dataclasses.dataclass
class SampleResult:
    op: str                       # OpInfo's full name ("max.reduction_with_dim")
    index: int                    # the sample's position among the op's samples
    outcome: str                  # one of OUTCOMES
    eager_ops: list[str] = dataclasses.field(default_factory=list)   # targets left in eager
    reasons: list[str] = dataclasses.field(default_factory=list)     # why, per distinct target
    detail: str = ""              # the mismatch or error, one line


@dataclasses.dataclass
class OpResult:
    op: str
    samples: list[SampleResult]

    def count(self, outcome: str) -> int:
        return sum(1 for s in self.samples if s.outcome == outcome)

    @property
    def wholly_in_daemon(self) -> bool:
        return (self.count("daemon") > 0 and self.count("eager") == 0
                and self.count("mismatch") == 0 and self.count("error") == 0)

    @property
    def wrong(self) -> bool:
        return self.count("mismatch") > 0

    @property
    def tested(self) -> bool:
        return any(s.outcome != "skipped" for s in self.samples)


@functools.lru_cache(maxsize=None)
def op_db() -> dict[str, Any]:
    """OpInfo's database by full name, ops with fp32 CPU support only."""
    from torch.testing._internal.common_methods_invocations import op_db as db
    return {op.full_name: op for op in db
            if torch.float32 in op.supported_dtypes("cpu")}


def _flat_tensors(sample: Any) -> tuple[list[Any], Any, list[int]]:
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return leaves, spec, positions


def _as_function(op: Any, sample: Any):
    """(fn, tensors): fn(*tensors) calls the op on the sample."""
    leaves, spec, positions = _flat_tensors(sample)

    def fn(*tensors: torch.Tensor) -> Any:
        filled = list(leaves)
        for p, t in zip(positions, tensors):
            filled[p] = t
        inp, args, kwargs = pytree.tree_unflatten(filled, spec)
        return op.op(inp, *args, **kwargs)

    return fn, [leaves[p] for p in positions]


def _clones(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone() for t in tensors]


def _outputs_equal(a: Any, b: Any) -> bool:
    try:
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        return True
    except Exception:  # noqa: BLE001 - any difference (values, structure) counts
        return False


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _mismatch(actual: Any, expected: Any) -> str:
    try:
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
        return ""
    except Exception as e:  # noqa: BLE001 - assert_close's message is the report
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return " | ".join(lines[:4])[:300]


def check_sample(op: Any, index: int, sample: Any) -> SampleResult:
    """Runs one sample in eager (twice) and through Kiln; compares."""
    import kiln

    name = op.full_name
    if op.name in UNDEFINED_RESULTS:
        return SampleResult(name, index, "skipped", detail="the result is undefined")
    fn, tensors = _as_function(op, sample)
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            expected = fn(*_clones(tensors))
            torch.manual_seed(0)
            again = fn(*_clones(tensors))
    except Exception as e:  # noqa: BLE001 - eager's own refusal: nothing to compare
        return SampleResult(name, index, "skipped", detail=f"eager raises {_one_line(e)}")
    if not _outputs_equal(expected, again):
        return SampleResult(name, index, "skipped", detail="eager is not deterministic")
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            report = kiln.explain(fn, *_clones(tensors), **OPTIONS)
    except Exception as e:  # noqa: BLE001 - Kiln must not raise where eager did not
        return SampleResult(name, index, "error", detail=_one_line(e))
    mismatch = _mismatch(report.output, expected)
    if mismatch:
        return SampleResult(name, index, "mismatch", detail=mismatch)
    eager_ops: list[str] = []
    reasons: list[str] = []
    for f in report.fallbacks:
        if f.target not in eager_ops:
            eager_ops.append(f.target)
            reasons.append(f.reason)
    for g in report.graphs:
        if g.eager_reason and not g.fallbacks:
            eager_ops.append("<graph>")
            reasons.append(g.eager_reason)
    if report.nodes_in_eager or eager_ops:
        return SampleResult(name, index, "eager", eager_ops, reasons)
    if report.nodes_in_daemon == 0:
        return SampleResult(name, index, "empty")
    return SampleResult(name, index, "daemon")


def samples(op: Any, limit: int | None) -> list[Any]:
    """The op's first `limit` fp32 CPU samples (all if None), seeded."""
    torch.manual_seed(0)
    out = []
    for s in op.sample_inputs("cpu", torch.float32, requires_grad=False):
        out.append(s)
        if limit is not None and len(out) >= limit:
            break
    return out


def check_op(op: Any, limit: int | None = None) -> OpResult:
    """Every sample of one op (or its first `limit`)."""
    try:
        todo = samples(op, limit)
    except Exception as e:  # noqa: BLE001 - OpInfo's own generator failed
        return OpResult(op.full_name, [SampleResult(op.full_name, 0, "skipped",
                                                    detail=f"samples: {_one_line(e)}")])
    return OpResult(op.full_name, [check_sample(op, i, s) for i, s in enumerate(todo)])


def check_ops(names: Iterable[str], limit: int | None = None) -> list[OpResult]:
    db = op_db()
    return [check_op(db[n], limit) for n in names]


def blocking_ops(results: Sequence[OpResult]) -> list[tuple[str, int, str]]:
    """(ATen target, OpInfo ops it keeps out of the daemon, one reason), most first."""
    by_target: dict[str, set[str]] = {}
    why: dict[str, str] = {}
    for r in results:
        for s in r.samples:
            for target, reason in zip(s.eager_ops, s.reasons):
                by_target.setdefault(target, set()).add(r.op)
                why.setdefault(target, reason)
    ranked = sorted(by_target.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [(t, len(ops), why[t]) for t, ops in ranked]


def summary(results: Sequence[OpResult]) -> dict[str, Any]:
    tested = [r for r in results if r.tested]
    counts = {o: sum(r.count(o) for r in results) for o in OUTCOMES}
    return {
        "ops": len(results),
        "ops_tested": len(tested),
        "ops_wholly_in_daemon": sum(1 for r in tested if r.wholly_in_daemon),
        "ops_wrong": sum(1 for r in tested if r.wrong),
        "samples": counts,
        "daemon_share": (counts["daemon"] / max(1, sum(counts[o] for o in OUTCOMES
                                                      if o not in ("skipped", "empty")))),
    }

