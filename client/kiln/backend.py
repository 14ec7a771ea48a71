"""The torch.compile backend: torch.compile(model, backend="kiln").

Dynamo graph -> functional ATen graph (lowering.py) -> partitions the daemon
supports (partition.py), each replaced by a KilnSubgraph; everything else
runs in eager. Counters of what ran where are exposed by stats().
"""
from __future__ import annotations

import contextvars
import dataclasses
import logging
import operator
import re
import threading
import time
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx

from kiln import aot, decompose, guards, lowering, lowering_cache, partition
from kiln.connection import Connection, get_connection
from kiln.fx_attrs import fetch_attr
from kiln.options import KilnOptions
from kiln.subgraph import KilnFallbackError, KilnSubgraph

log = logging.getLogger(__name__)


@dataclasses.dataclass
class BackendStats:
    """What the backend did since the last reset_stats() (process-wide)."""
    graphs: int = 0                # graphs handed to the backend
    eager_graphs: int = 0          # of which run entirely in eager (autograd, lowering failed)
    partitions: int = 0            # daemon partitions created
    fallback_partitions: int = 0   # partitions the daemon rejected (now eager)
    nodes_in_daemon: int = 0       # ATen nodes in live daemon partitions
    nodes_in_eager: int = 0        # ATen (or Dynamo, for eager graphs) nodes left in eager
    lowering_cache_hits: int = 0   # graphs whose lowering and partitioning came from disk
    lowering_cache_misses: int = 0  # cacheable graphs lowered and partitioned afresh


_stats = BackendStats()
_stats_lock = threading.Lock()
_warned: set[str] = set()


def stats() -> BackendStats:
    """A copy of the backend's counters."""
    with _stats_lock:
        return dataclasses.replace(_stats)


def reset_stats() -> None:
    global _stats
    with _stats_lock:
        _stats = BackendStats()


def _bump(**deltas: int) -> None:
    with _stats_lock:
        for key, delta in deltas.items():
            setattr(_stats, key, getattr(_stats, key) + delta)


def _warn_once(key: str, message: str, *args: object) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def _needs_grad(args: Sequence[object]) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def _count_calls(gm: fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function")


class CompiledGraph:
    """What the backend returns for one Dynamo graph."""

    def __init__(self, eager: Callable[..., Any], split: fx.GraphModule | None,
                 subgraphs: Sequence[KilnSubgraph]):
        self.eager = eager
        self.split = split
        self.subgraphs = list(subgraphs)
        self._run = (split if split is None else _direct_call(split)) or split

    def __call__(self, *args: Any) -> Any:
        if self.split is None:
            return self.eager(*args)
        if _needs_grad(args):
            _warn_once("grad", "kiln: graph needs autograd; running it in eager "
                       "(training is not supported yet)")
            return self.eager(*args)
        return self._run(*args)


def _direct_call(split: fx.GraphModule) -> Callable[..., Any] | None:
    """split's forward without the GraphModule and Module calls around it,
    when the whole graph is one partition (the usual case): its inputs are
    graph inputs and the output holds only its results (or inputs). Those
    two call layers are a measurable part of a small CNN's call. None for
    any other shape of graph."""
    inputs: dict[fx.Node, int] = {}
    call = output = None
    for node in split.graph.nodes:
        if node.op == "placeholder":
            inputs[node] = len(inputs)
        elif node.op == "call_module" and call is None and not node.kwargs:
            call = node
        elif (node.op == "call_function" and node.target is operator.getitem
              and call is not None and node.args[0] is call and not node.kwargs):
            pass
        elif node.op == "output":
            output = node
        else:
            return None
    if call is None or output is None or not all(a in inputs for a in call.args):
        return None
    sub = split.get_submodule(call.target)
    if not isinstance(sub, KilnSubgraph):
        return None
    positions = [inputs[a] for a in call.args]

    # Each output item: ("all",), ("item", k) or ("input", i).
    def source(item: Any) -> tuple | None:
        if item is call:
            return ("all",)
        if isinstance(item, fx.Node) and item in inputs:
            return ("input", inputs[item])
        if (isinstance(item, fx.Node) and item.op == "call_function"
                and item.target is operator.getitem and isinstance(item.args[1], int)):
            return ("item", item.args[1])
        return None

    result = output.args[0]
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    sources = [source(item) for item in items]
    if any(s is None for s in sources):
        return None
    forward = sub.forward
    as_type = type(result) if isinstance(result, (tuple, list)) else None
    # Usually every input, in order: passed on as they come.
    if positions == list(range(len(inputs))):
        take = None
    elif len(positions) < 2:
        take = lambda args: tuple(args[i] for i in positions)  # noqa: E731
    else:
        take = operator.itemgetter(*positions)

    def run(*args: Any) -> Any:
        got = forward(*(args if take is None else take(args)))
        values = [got if s[0] == "all" else got[s[1]] if s[0] == "item" else args[s[1]]
                  for s in sources]
        return as_type(values) if as_type is not None else values[0]
    return run


def _on_fallback(sub: KilnSubgraph) -> None:
    _bump(fallback_partitions=1, nodes_in_daemon=-sub.num_nodes, nodes_in_eager=sub.num_nodes)


def _eager_graph(gm: fx.GraphModule, why: str) -> CompiledGraph:
    _bump(eager_graphs=1, nodes_in_eager=_count_calls(gm))
    _record(GraphRecord(gm, eager_reason=why))
    return CompiledGraph(gm.forward, None, [])


def _is_symbolic(args: Sequence[Any]) -> bool:
    for a in args:
        if isinstance(a, torch.SymInt):
            return True
        if isinstance(a, torch.Tensor) and any(not isinstance(d, int) for d in a.shape):
            return True
    return False


class SpecializedGraph:
    """A Dynamo graph with symbolic shapes that AOTAutograd could not trace
    symbolically: compiled once per concrete signature (up to
    MAX_SPECIALIZATIONS), the rest run in eager. The usual path keeps sizes
    symbolic instead (compile_graph, traced=True)."""

    MAX_SPECIALIZATIONS = 8

    def __init__(self, gm: fx.GraphModule, opts: KilnOptions, conn: Connection):
        self.gm = gm
        self.opts = opts
        self.conn = conn
        self.compiled: dict[tuple, CompiledGraph] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if _needs_grad(args):
            _warn_once("grad", "kiln: graph needs autograd; running it in eager "
                       "(training is not supported yet)")
            return self.gm(*args)
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a
                    for a in args)
        with self._lock:
            compiled = self.compiled.get(key)
            if compiled is None:
                if len(self.compiled) >= self.MAX_SPECIALIZATIONS:
                    _warn_once(f"spec:{id(self)}", "kiln: more than %d input shapes for one "
                               "graph; new shapes run in eager", self.MAX_SPECIALIZATIONS)
                    return self.gm(*args)
                compiled = compile_graph(self.gm, args, self.opts, self.conn, static_only=True)
                self.compiled[key] = compiled
        return compiled(*args)


_NODE_IN_MESSAGE = re.compile(r"node '([^']+)'")
MAX_REPARTITIONS = 8
# Reasons for eager nodes the user chose (options), logged at info, not as warnings.
_CHOSEN_REASONS = frozenset({"disabled by option", "partition too small (min_partition_size)"})
# Not a fallback: what the write-back copies was computed in the daemon.
_EXPECTED_REASONS = _CHOSEN_REASONS | {partition.WRITE_BACK}


def _rejected_node(sub: KilnSubgraph) -> str | None:
    """The node a daemon rejection names, if it is one of sub's op nodes."""
    match = _NODE_IN_MESSAGE.search(sub.fallback_reason or "")
    if match is None:
        return None
    names = {n.name for n in sub.eager.graph.nodes if n.op == "call_function"}
    return match.group(1) if match.group(1) in names else None


def _eager_or_raise(opts: KilnOptions, gm: fx.GraphModule, why: str) -> CompiledGraph:
    if opts.fallback == "error":
        raise KilnFallbackError(f"kiln: graph of {_count_calls(gm)} nodes would run in eager: "
                                f"{why} (options fallback='error')")
    return _eager_graph(gm, why)


def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[Any],
                  opts: KilnOptions, conn: Connection,
                  constant_inputs: frozenset[int] | None = None,
                  traced: bool = False, static_only: bool = False) -> Callable[..., Any]:
    """Lowers, partitions and compiles one Dynamo (or AOTAutograd) graph:
    lowering (or the lowering cache), then _partition_and_compile, then
    _account for what runs where.

    `constant_inputs`: positions of the inputs that are weights, when the
    caller knows better than the graph's own metadata (aot.py).
    `traced`: gm is already AOTAutograd's functional ATen graph.
    `static_only`: example_inputs are concrete; never take the symbolic path.

    Symbolic sizes (Dynamo's dynamic shapes) stay symbolic: AOTAutograd
    traces the graph once with them, the partitions are compiled once as
    dynamic-shape templates, and the daemon specializes them per concrete
    shape (subgraph.py). Nothing is traced, partitioned or uploaded again
    when a new shape arrives.

    When the daemon rejects a partition naming one node (e.g. batch norm in
    training mode), that node is moved to eager and the graph partitioned
    again, so one unsupported use does not drag its neighbours into eager.
    """
    symbolic = not static_only and _is_symbolic(example_inputs)
    if symbolic and not traced and not _needs_grad(example_inputs):
        try:
            return aot.compile_with_aot(
                gm, example_inputs,
                lambda g, inputs, constants: compile_graph(g, inputs, opts, conn, constants,
                                                           traced=True),
                opts.decompositions)
        except Exception as e:  # noqa: BLE001 - any tracing failure: the old way
            _warn_once(f"symbolic:{type(e).__name__}", "kiln: could not trace the graph with "
                       "symbolic shapes (%s); compiling it per input shape", e)
            return SpecializedGraph(gm, opts, conn)
    _bump(graphs=1)
    if _needs_grad(example_inputs):
        if opts.fallback == "error":
            return _eager_or_raise(opts, gm, "it needs autograd (use options "
                                   "aot_autograd=True to compile forward and backward)")
        _warn_once("grad", "kiln: graph needs autograd; running it in eager "
                   "(options aot_autograd=True compiles forward and backward graphs)")
        return _eager_graph(gm, "it needs autograd (options aot_autograd=True compiles "
                            "forward and backward graphs)")
    # A warm compile takes the lowered, partitioned graph from disk instead
    # (lowering_cache.py); static graphs only.
    cache = (None if traced or static_only
             else lowering_cache.for_graph(gm, example_inputs, opts, conn, constant_inputs))
    started = time.perf_counter()
    cached = cache.load(example_inputs) if cache is not None else None
    lowered: lowering.LoweredGraph | None = None
    if cached is None:
        lowered = _lower(gm, example_inputs, opts, constant_inputs, traced)
        if isinstance(lowered, CompiledGraph):
            return lowered
    else:
        _bump(lowering_cache_hits=1)
        took = time.perf_counter() - started
        log.debug("lowering cache hit for graph %s: restored in %.1f ms, saving %.2f s",
                  cache.key[:16], 1e3 * took, cached.cold_s - took)
    done = _partition_and_compile(gm, example_inputs, opts, conn, constant_inputs, traced,
                                  cached, lowered, started)
    if isinstance(done, CompiledGraph):
        return done
    _account(gm, done, opts)
    if cache is not None and cached is None:
        _bump(lowering_cache_misses=1)
        log.debug("lowering cache miss for graph %s: lowered and partitioned in %.2f s%s",
                  cache.key[:16], done.cold_s,
                  "" if not done.excluded else " (not stored: the daemon rejected nodes)")
        if not done.excluded:
            cache.store(done.split, done.constants, done.cold_s)
    _record(GraphRecord(gm, split=done.split, subgraphs=list(done.subgraphs),
                        capabilities=done.caps, excluded=frozenset(done.excluded),
                        disabled=done.disabled, rejections=done.rejections))
    return CompiledGraph(gm.forward, done.split, done.subgraphs)


@dataclasses.dataclass
class _Partitioned:
    """A graph's final partitioning, with what it took to get there."""
    split: fx.GraphModule            # eager nodes and fused_<n> KilnSubgraphs
    constants: frozenset[int]        # weight input positions
    subgraphs: list[KilnSubgraph]
    caps: partition.Capabilities
    views: frozenset[str]            # ops that compute nothing (capabilities' view trait)
    disabled: Callable[[object], bool] | None  # options disabled_ops
    excluded: set[str]               # nodes moved to eager after a daemon rejection
    rejections: dict[str, str]       # for kiln.explain
    cold_s: float = 0.0              # lowering and partitioning (not from the cache)


def _partition_and_compile(gm: fx.GraphModule, example_inputs: Sequence[Any],
                           opts: KilnOptions, conn: Connection,
                           constant_inputs: frozenset[int] | None, traced: bool,
                           cached: lowering_cache.CachedLowering | None,
                           lowered: lowering.LoweredGraph | None,
                           started: float) -> _Partitioned | CompiledGraph:
    """Partitions the lowered (or cached) graph and compiles every partition;
    while the daemon rejects partitions naming a node, moves those nodes to
    eager and partitions again (up to MAX_REPARTITIONS times). A
    CompiledGraph running gm in eager if lowering (needed again after a
    rejection in a cached graph) fails."""
    caps = partition.capabilities_from_proto(conn.capabilities())
    views = partition.view_ops_from_proto(conn.capabilities())
    disabled = opts.disabled_ops.matches if opts.disabled_ops else None
    excluded: set[str] = set()
    rejections: dict[str, str] = {}
    cold_s = 0.0
    for attempt in range(MAX_REPARTITIONS + 1):
        if cached is not None and not excluded:
            split, constants = cached.split, cached.constant_inputs
        else:
            if lowered is None:  # the daemon rejected a node of a cached graph
                lowered = _lower(gm, example_inputs, opts, constant_inputs, traced)
                if isinstance(lowered, CompiledGraph):
                    return lowered
            gm_copy = _copy_graph_module(lowered.gm)
            if opts.auto_decompose:
                decompose.decompose_unsupported(
                    gm_copy, caps, lowering.decomposition_table(opts.decompositions), disabled)
            split = partition.partition(gm_copy, caps, excluded,
                                        disabled, opts.min_partition_size, views=views)
            constants = lowered.constant_inputs
            cold_s = time.perf_counter() - started
        subgraphs = _compile_partitions(split, constants, example_inputs, opts, conn)
        rejected = {name for name in map(_rejected_node, subgraphs) if name} - excluded
        rejections.update(_rejection_messages(subgraphs))
        if not rejected or attempt == MAX_REPARTITIONS:
            break
        log.warning("kiln: moving %s to eager and partitioning again",
                    ", ".join(sorted(rejected)))
        excluded |= rejected
        for sub in subgraphs:
            sub.close()
    return _Partitioned(split, constants, subgraphs, caps, views, disabled, excluded, rejections,
                        cold_s)


def _eager_nodes(done: _Partitioned) -> tuple[int, dict[str, list[str]]]:
    """How many nodes of the split graph run in eager, and the compute nodes
    among them by the reason they do ("name (target)")."""
    eager_nodes = 0
    eager_reasons: dict[str, list[str]] = {}
    chains = partition.storage_chains(done.split)
    for node in done.split.graph.nodes:
        if node.op == "call_function":
            # getitems on a fused partition's tuple are plumbing, not work.
            source = node.args[0] if node.args else None
            if not (node.target is operator.getitem and isinstance(source, fx.Node)
                    and source.op == "call_module"):
                eager_nodes += 1
                if partition.is_compute_node(node, done.views):
                    reason = partition.eager_reason(node, done.caps, done.excluded,
                                                    done.disabled, chains=chains)
                    eager_reasons.setdefault(reason, []).append(f"{node.name} ({node.target})")
    return eager_nodes, eager_reasons


def _account(gm: fx.GraphModule, done: _Partitioned, opts: KilnOptions) -> None:
    """Says what runs in eager (or, under fallback="error", raises
    KilnFallbackError) and counts it in stats()."""
    eager_nodes, eager_reasons = _eager_nodes(done)
    subgraphs = done.subgraphs
    rejected_subs = [sub for sub in subgraphs if sub.fallback]
    fallbacks = {r: names for r, names in eager_reasons.items() if r != partition.WRITE_BACK}
    for reason, names in eager_reasons.items():
        if opts.fallback == "error" and reason in fallbacks:
            continue  # raised below
        # What the user asked for is news, not a problem.
        level = logging.INFO if reason in _EXPECTED_REASONS else logging.WARNING
        log.log(level, "kiln: %d node(s) run in eager (%s): %s%s", len(names),
                reason, ", ".join(names[:8]),
                " ..." if len(names) > 8 else "")
    if opts.fallback == "error" and (fallbacks or rejected_subs):
        for sub in subgraphs:
            sub.close()
        parts = [f"{reason}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"
                 for reason, names in fallbacks.items()]
        parts += [f"partition {sub.name} rejected by the daemon: {sub.fallback_reason}"
                  for sub in rejected_subs]
        raise KilnFallbackError("kiln: nodes would run in eager (options fallback='error'): "
                                + "; ".join(parts))
    for sub in subgraphs:
        if sub.fallback:
            _bump(fallback_partitions=1)
            eager_nodes += sub.num_nodes
        else:
            _bump(nodes_in_daemon=sub.num_nodes)
        sub.on_fallback = _on_fallback
        sub.raise_on_fallback = opts.fallback == "error"
    _bump(partitions=len(subgraphs), nodes_in_eager=eager_nodes)


def _lower(gm: fx.GraphModule, example_inputs: Sequence[Any], opts: KilnOptions,
           constant_inputs: frozenset[int] | None,
           traced: bool) -> lowering.LoweredGraph | CompiledGraph:
    """The functional ATen graph, or (lowering failed) gm run in eager."""
    try:
        if traced:  # AOTAutograd's graph: functional ATen, decomposed with our table
            return lowering.LoweredGraph(gm, lowering.tensor_positions(
                constant_inputs or frozenset(), example_inputs))
        return lowering.lower(gm, example_inputs, extra_decompositions=opts.decompositions,
                              constant_inputs=constant_inputs)
    except lowering.LoweringError as e:
        if opts.fallback == "error":
            return _eager_or_raise(opts, gm, str(e))
        _warn_once(f"lower:{e}", "kiln: running graph in eager: %s", e)
        return _eager_graph(gm, f"lowering failed: {e}")


def _copy_graph_module(gm: fx.GraphModule) -> fx.GraphModule:
    """A GraphModule with its own copy of gm's graph (partitioning rewrites
    it) sharing gm's attributes: deep-copying those would copy weights, and
    fails for real tensors while AOTAutograd's fake mode is active."""
    graph = fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    return fx.GraphModule(gm, graph)


def _eager_compute_follows(node: fx.Node) -> bool:
    """Whether the split graph computes in eager right after partition
    `node`: an op other than a view or an item of a partition's results
    before the next partition (or the output)."""
    nxt = node.next
    while nxt.op not in ("call_module", "output", "root"):
        if nxt.op == "call_function" and nxt.target is not operator.getitem \
                and not getattr(nxt.target, "is_view", False):
            return True
        nxt = nxt.next
    return False


def _write_backs(node: fx.Node) -> list[tuple[int, int]]:
    """(output, argument position) of partition `node` for each output the
    split graph copies back into a tensor the partition also takes: the
    updated value of an input the graph writes in place."""
    values = {user.args[1]: user for user in node.users
              if user.target is operator.getitem and isinstance(user.args[1], int)}
    if not values:
        values = {0: node}
    pairs: list[tuple[int, int]] = []
    for output, value in sorted(values.items()):
        for user in value.users:
            if (partition.is_write_back(user) and user.args[1] is value
                    and user.args[0] in node.args):
                position = node.args.index(user.args[0])
                if all(position != p for _, p in pairs):
                    pairs.append((output, position))
                    break
    return pairs


def _compile_partitions(split: fx.GraphModule, constant_inputs: frozenset[int],
                        example_inputs: Sequence[Any], opts: KilnOptions,
                        conn: Connection) -> list[KilnSubgraph]:
    """Replaces each fused submodule of split by a compiled KilnSubgraph."""
    placeholder_index = {n: i for i, n in enumerate(
        n for n in split.graph.nodes if n.op == "placeholder")}
    subgraphs = []
    for node in split.graph.nodes:
        if node.op != "call_module":
            continue
        fused = getattr(split, node.target)
        # Parameters/buffers feeding the partition directly are compiled in
        # as constants; KilnSubgraph only needs their real values here.
        constant_positions, constant_args = [], []
        for pos, arg in enumerate(node.args):
            index = placeholder_index.get(arg)
            if index is not None and index in constant_inputs:
                constant_positions.append(pos)
                constant_args.append(example_inputs[index])
            elif isinstance(arg, fx.Node) and arg.op == "get_attr":
                constant_positions.append(pos)
                constant_args.append(fetch_attr(split, arg.target, None))
            else:
                constant_args.append(None)
        sub = KilnSubgraph(node.target, fused, constant_positions, constant_args,
                           conn, model_caching=opts.model_caching,
                           compile_options=opts.config.to_request(),
                           timeout_s=opts.timeout,
                           writes_back=[(o, p) for o, p in _write_backs(node)
                                        if p not in constant_positions])
        sub.client_computes_next = _eager_compute_follows(node)
        setattr(split, node.target, sub)
        subgraphs.append(sub)
    split.recompile()
    return subgraphs


def kiln_backend(gm: fx.GraphModule, example_inputs: Sequence[Any],
                 options: Mapping[str, Any] | None = None,
                 mode: str | None = None) -> Callable[..., Any]:
    """torch.compile backend entry point (registered as "kiln").

    Returns the compiled graph as a precompiled.KilnCompiledFunction, which
    torch's aot_compile can save and load."""
    if mode not in (None, "default"):
        _warn_once(f"mode:{mode}", "kiln: ignoring torch.compile mode=%r", mode)
    from kiln.precompiled import KilnCompiledFunction
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weights = frozenset(i for i, (n, e) in enumerate(zip(placeholders, example_inputs))
                        if lowering.is_param_or_buffer(n, e))
    compiled = compile_for_torch(gm, example_inputs, options)
    return KilnCompiledFunction(compiled, gm, weights, options)


def compile_for_torch(gm: fx.GraphModule, example_inputs: Sequence[Any],
                      options: Mapping[str, Any] | None,
                      constant_inputs: frozenset[int] | None = None) -> Callable[..., Any]:
    """What kiln_backend compiles gm to. `constant_inputs`: the positions of
    gm's inputs that are weights, when gm no longer says (a graph loaded by
    torch.compiler.load_compiled_function: its metadata was not saved)."""
    opts = KilnOptions.from_mapping(options)
    conn = get_connection(opts.socket, opts.autostart, opts.cache_dir, opts.daemon_idle_min)
    _check_device(opts, conn)
    if opts.dict_tag_guards:
        guards.use_for_this_frame()
    inputs = len(example_inputs)
    gm, attributes = lowering.lift_tensor_attributes(gm)
    if attributes:
        example_inputs = [*example_inputs, *attributes]
        if constant_inputs is not None:
            constant_inputs = constant_inputs | frozenset(range(inputs, len(example_inputs)))
    if opts.aot_autograd:
        compiled = aot.compile_with_aot(
            gm, example_inputs,
            lambda g, inputs, constants: compile_graph(g, inputs, opts, conn, constants,
                                                       traced=True),
            opts.decompositions)
    else:
        compiled = compile_graph(gm, example_inputs, opts, conn, constant_inputs)
    return _with_attributes(compiled, attributes) if attributes else compiled


def _with_attributes(compiled: Callable[..., Any],
                     attributes: Sequence[torch.Tensor]) -> Callable[..., Any]:
    """compiled called with the lifted attribute tensors after Dynamo's
    arguments (lowering.lift_tensor_attributes)."""
    attributes = tuple(attributes)

    def run(*args: Any) -> Any:
        return compiled(*args, *attributes)
    return run


def _check_device(opts: KilnOptions, conn: Connection) -> None:
    devices = list(conn.capabilities().devices)
    if opts.device.upper() not in (d.upper() for d in devices):
        raise ValueError(f"kiln option device={opts.device!r}: the daemon on "
                         f"{conn.socket_path} offers {', '.join(devices) or 'no devices'}")


# ---- Diagnostics hook (kiln.explain) -----------------------------------------
# compile_graph hands a GraphRecord of every graph it finishes to the recorder
# kiln.explain installs while it runs (a contextvar: compiles in other
# threads and contexts are not recorded). Recording changes nothing about
# what is compiled; with no recorder installed it costs one lookup per graph.


@dataclasses.dataclass
class GraphRecord:
    """One graph as compile_graph left it (read by kiln.explain after the run,
    so partitions that fall back at their first call are seen)."""
    gm: fx.GraphModule                       # the graph compile_graph was given
    eager_reason: str = ""                   # why it runs whole in eager ("" if partitioned)
    split: fx.GraphModule | None = None      # partitioned ATen graph
    subgraphs: list[KilnSubgraph] = dataclasses.field(default_factory=list)
    capabilities: partition.Capabilities | None = None
    excluded: frozenset[str] = frozenset()   # nodes moved to eager after a daemon rejection
    disabled: Callable[[object], bool] | None = None
    rejections: dict[str, str] = dataclasses.field(default_factory=dict)  # node -> daemon's reason


graph_recorder: contextvars.ContextVar[Callable[[GraphRecord], None] | None] = (
    contextvars.ContextVar("kiln_graph_recorder", default=None))


def _record(record: GraphRecord) -> None:
    recorder = graph_recorder.get()
    if recorder is not None:
        recorder(record)


def _rejection_messages(subgraphs: Sequence[KilnSubgraph]) -> dict[str, str]:
    """node name -> the daemon's message, for rejections naming one node."""
    return {name: sub.fallback_reason for sub in subgraphs
            if (name := _rejected_node(sub)) is not None}
