"""kiln.explain: what ran in the daemon, what stayed in eager, and why.

    report = kiln.explain(model, x, disabled_ops=["aten.relu"])
    print(report)                       # readable summary
    report.graphs[0].fallbacks          # structured: node, target, reason

It compiles model_or_fn with the kiln backend (the keyword arguments are
its options), runs it once on the inputs and reports, per graph the
backend compiled: op nodes run in the daemon and in eager, each eager node
with its reason, each partition (and the daemon's reason if it rejected
one), and the constant bytes uploaded vs already held by the daemon.

Like torch._dynamo.explain it calls torch._dynamo.reset() first, so every
graph is compiled afresh and seen, and again when done, so nothing it
compiled stays cached: every torch.compile'd function in the process
recompiles on its next call. The data comes from a hook in
backend.compile_graph (backend.graph_recorder).
"""
from __future__ import annotations

import collections
import dataclasses
import operator
from typing import Any, Callable

import torch
import torch.fx as fx

from kiln import backend, partition
from kiln.connection import ConstantTransfer


@dataclasses.dataclass
class Fallback:
    """One op node that runs in eager."""
    node: str      # FX node name in the ATen graph
    target: str    # "aten.special_erfcx.default"
    reason: str    # "unsupported op", "disabled by option", "dtype float64 not supported",
                   # "rejected by the daemon: ...", ...


@dataclasses.dataclass
class PartitionReport:
    name: str                  # fused_<n>
    nodes: int                 # op nodes
    in_daemon: bool            # False once the daemon rejected it (it runs in eager)
    reason: str                # the daemon's reason when rejected
    constants: ConstantTransfer
    options: str = ""          # as the daemon applied them ("... precision=bf16 (auto) ...")


@dataclasses.dataclass
class GraphReport:
    """One graph the backend compiled: a Dynamo graph, or with aot_autograd
    one of AOTAutograd's graphs traced from it."""
    index: int
    dynamo_graph: int          # index of the Dynamo graph it came from
    nodes: int                 # op nodes (getitem excluded): ATen, or Dynamo's if eager_reason
    nodes_in_daemon: int
    nodes_in_eager: int
    eager_reason: str          # why the whole graph runs in eager ("" if partitioned)
    partitions: list[PartitionReport]
    fallbacks: list[Fallback]

    @property
    def constants(self) -> ConstantTransfer:
        total = ConstantTransfer()
        for p in self.partitions:
            total.add(p.constants)
        return total


@dataclasses.dataclass
class Explanation:
    graphs: list[GraphReport]
    dynamo_graphs: int         # graphs Dynamo handed the backend
    graph_breaks: list[str]    # Dynamo's reason per graph break, in order
    output: Any                # what the compiled model returned

    @property
    def nodes_in_daemon(self) -> int:
        return sum(g.nodes_in_daemon for g in self.graphs)

    @property
    def nodes_in_eager(self) -> int:
        return sum(g.nodes_in_eager for g in self.graphs)

    @property
    def partitions(self) -> int:
        return sum(len(g.partitions) for g in self.graphs)

    @property
    def fallbacks(self) -> list[Fallback]:
        return [f for g in self.graphs for f in g.fallbacks]

    @property
    def constants(self) -> ConstantTransfer:
        total = ConstantTransfer()
        for g in self.graphs:
            total.add(g.constants)
        return total

    def __str__(self) -> str:
        c = self.constants
        lines = [f"kiln.explain: {self.dynamo_graphs} Dynamo graph(s), {len(self.graphs)} "
                 f"compiled graph(s), {self.partitions} partition(s); op nodes: "
                 f"{self.nodes_in_daemon} in the daemon, {self.nodes_in_eager} in eager",
                 f"  constants: {c.uploaded} uploaded ({_bytes(c.uploaded_bytes)}), "
                 f"{c.reused} already in the daemon ({_bytes(c.reused_bytes)})"]
        for reason in self.graph_breaks:
            lines.append(f"  graph break: {_first_line(reason)}")
        for g in self.graphs:
            lines.append(f"graph {g.index} (Dynamo graph {g.dynamo_graph}): {g.nodes} op nodes, "
                         f"{g.nodes_in_daemon} in the daemon, {g.nodes_in_eager} in eager")
            if g.eager_reason:
                lines.append(f"  runs in eager: {g.eager_reason}")
            for p in g.partitions:
                where = ("the daemon" if p.in_daemon
                         else f"eager [rejected by the daemon: {p.reason}]")
                lines.append(f"  partition {p.name}: {p.nodes} op nodes in {where}; constants "
                             f"{p.constants.uploaded} uploaded "
                             f"({_bytes(p.constants.uploaded_bytes)}), {p.constants.reused} "
                             f"reused ({_bytes(p.constants.reused_bytes)})"
                             + (f"; {p.options}" if p.options and p.in_daemon else ""))
            by_reason: dict[str, list[Fallback]] = collections.defaultdict(list)
            for f in g.fallbacks:
                by_reason[f.reason].append(f)
            for reason, nodes in by_reason.items():
                names = ", ".join(f"{f.node} ({f.target})" for f in nodes[:6])
                more = f" and {len(nodes) - 6} more" if len(nodes) > 6 else ""
                lines.append(f"  eager [{reason}]: {names}{more}")
        return "\n".join(lines)


def explain(model_or_fn: Callable[..., Any], *inputs: Any, **options: Any) -> Explanation:
    """Compiles model_or_fn with backend="kiln" and `options`, runs it once on
    `inputs` and reports what ran where (see the module doc; resets Dynamo
    before and after)."""
    records: list[tuple[int, backend.GraphRecord]] = []
    dynamo_gms: list[fx.GraphModule] = []

    def dynamo_index(gm: fx.GraphModule) -> int:
        # A Dynamo graph itself (compiled directly, or lazily per shape),
        # else one AOTAutograd traced from the Dynamo graph being compiled.
        for i, g in enumerate(dynamo_gms):
            if g is gm:
                return i
        return len(dynamo_gms) - 1

    def record(r: backend.GraphRecord) -> None:
        records.append((dynamo_index(r.gm), r))

    def kiln_backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        dynamo_gms.append(gm)
        return backend.kiln_backend(gm, example_inputs, options=options)

    breaks_before = collections.Counter(torch._dynamo.utils.counters["graph_break"])
    torch._dynamo.reset()
    token = backend.graph_recorder.set(record)
    try:
        output = torch.compile(model_or_fn, backend=kiln_backend)(*inputs)
        graphs = [_graph_report(i, index, r) for i, (index, r) in enumerate(records)]
    finally:
        backend.graph_recorder.reset(token)
        del records[:]
        torch._dynamo.reset()
    breaks = collections.Counter(torch._dynamo.utils.counters["graph_break"]) - breaks_before
    return Explanation(graphs, len(dynamo_gms), list(breaks.elements()), output)


def _op_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes
            if n.op == "call_function" and n.target is not operator.getitem]


def _graph_report(index: int, dynamo_graph: int, r: backend.GraphRecord) -> GraphReport:
    if r.split is None:
        nodes = sum(1 for n in r.gm.graph.nodes
                    if n.op in ("call_function", "call_method", "call_module"))
        return GraphReport(index, dynamo_graph, nodes, 0, nodes, r.eager_reason, [], [])
    partitions: list[PartitionReport] = []
    fallbacks: list[Fallback] = []
    chains = partition.storage_chains(r.split)
    for node in r.split.graph.nodes:
        if node.op == "call_module":
            sub = getattr(r.split, node.target)
            ops = _op_nodes(sub.eager)
            partitions.append(PartitionReport(sub.name, len(ops), not sub.fallback,
                                              sub.fallback_reason,
                                              dataclasses.replace(sub.constant_transfer),
                                              sub.applied_options))
            if sub.fallback:
                fallbacks += [Fallback(n.name, str(n.target),
                                       f"partition {sub.name} rejected by the daemon: "
                                       f"{sub.fallback_reason}") for n in ops]
        elif node.op == "call_function" and node.target is not operator.getitem:
            if node.name in r.rejections:
                reason = f"rejected by the daemon: {r.rejections[node.name]}"
            else:
                reason = partition.eager_reason(node, r.capabilities or {}, r.excluded,
                                                r.disabled, chains=chains)
            fallbacks.append(Fallback(node.name, str(node.target), reason))
    in_daemon = sum(p.nodes for p in partitions if p.in_daemon)
    return GraphReport(index, dynamo_graph, in_daemon + len(fallbacks), in_daemon,
                       len(fallbacks), "", partitions, fallbacks)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    explanation = next((line for line in lines if line.startswith("Explanation:")), "")
    return f"{lines[0]} ({explanation})" if explanation and lines else (lines[0] if lines else "")
