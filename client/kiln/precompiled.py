"""What the kiln backend returns to torch.compile: the compiled graph, in a
form torch's precompile can save and load (torch.compile(fn, fullgraph=True,
backend="kiln").aot_compile(...), .save_compiled_function(path) and
torch.compiler.load_compiled_function), so that a new process reaches its
first result without Dynamo tracing the model again.

What is saved is the Dynamo graph itself (its code and the tensors it reads
as attributes; not the metadata Dynamo hangs on it, which does not pickle)
with which of its inputs are weights and the backend's options: not the
lowering, the partitions or the daemon's compiled graphs, which live in the
caches already (the lowering cache in the daemon's cache directory, the
daemon's compiled-graph entries and saved weights beside them). A loaded
function compiles its graph at its first call, with the call's own inputs
as the examples: on the host that saved it, or one whose cache directory
holds the same entries (a cache archive, the fleet's Redis), that is two
cache hits and no trace; anywhere else, the usual compile. Guards (grad
mode, input shapes and dtypes) are torch's, checked by the loaded function.

The saved bytes are a pickle, as the rest of the file torch writes is:
load only functions you saved or trust, as with torch.load(weights_only=False).
"""
from __future__ import annotations

import pickle
import threading
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx
from torch._dynamo.aot_compile_types import SerializableCallable

from kiln.fx_attrs import fetch_attr, holder_of

# 1: {"format", "graph" (a pickled GraphModule), "constant_inputs", "options"}.
FORMAT = 1

# Builds the callable for a graph: (graph, example inputs, options, weight
# positions) -> callable (kiln.backend.compile_for_torch).
Builder = Callable[[fx.GraphModule, Sequence[Any], Mapping[str, Any], "frozenset[int] | None"],
                   Callable[..., Any]]


class KilnCompiledFunction(SerializableCallable):
    """A Dynamo graph compiled by Kiln (or to be, at its first call once
    loaded), callable as the graph is."""

    def __init__(self, compiled: Callable[..., Any] | None, graph: fx.GraphModule,
                 constant_inputs: frozenset[int], options: Mapping[str, Any] | None):
        self._compiled = compiled
        self._graph = graph
        self._constant_inputs = constant_inputs
        self._options = dict(options or {})
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        compiled = self._compiled
        if compiled is None:
            compiled = self._build(args)
        return compiled(*args)

    def _build(self, args: Sequence[Any]) -> Callable[..., Any]:
        from kiln import backend
        with self._lock:
            if self._compiled is None:
                self._compiled = backend.compile_for_torch(
                    self._graph, list(args), self._options, self._constant_inputs)
            return self._compiled

    @classmethod
    def serialize_compile_artifacts(cls, fn: "KilnCompiledFunction") -> bytes:
        try:
            options = pickle.dumps(fn._options)
        except Exception as e:  # noqa: BLE001 - any unpicklable option value
            raise RuntimeError(f"kiln: cannot save a compiled function whose backend options "
                               f"do not pickle ({e}); pass plain values") from e
        return pickle.dumps({"format": FORMAT, "graph": _graph_state(fn._graph),
                             "constant_inputs": sorted(fn._constant_inputs),
                             "options": options})

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "KilnCompiledFunction":
        state = pickle.loads(data)
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise RuntimeError(f"kiln: a compiled function saved in format {found!r}; this "
                               f"client reads format {FORMAT}: compile and save it again")
        return cls(None, _graph_from_state(state["graph"]), frozenset(state["constant_inputs"]),
                   pickle.loads(state["options"]))


class _Ref:
    """A node argument: the node at this position of the saved graph."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __reduce__(self):
        return (_Ref, (self.index,))


def _graph_state(gm: fx.GraphModule) -> bytes:
    """gm's graph as it is (node names, targets, arguments), without node
    metadata (fake tensors, sources, stack traces of the tracing process),
    with the attributes it reads. Call targets go by their qualified name
    (as FX's generated code names them): many of torch's functions do not
    pickle."""
    index: dict[fx.Node, int] = {}
    nodes = []
    for i, node in enumerate(gm.graph.nodes):
        target: Any = node.target
        if node.op == "call_function":
            target = _qualified_name(target)
        nodes.append((node.op, node.name, target,
                      fx.map_arg(node.args, lambda n: _Ref(index[n])),
                      fx.map_arg(node.kwargs, lambda n: _Ref(index[n]))))
        index[node] = i
    attributes = {node.target: fetch_attr(gm, node.target) for node in gm.graph.nodes
                  if node.op == "get_attr"}
    if any(node.op == "call_module" for node in gm.graph.nodes):
        raise RuntimeError("kiln: cannot save a graph that calls submodules")
    try:
        return pickle.dumps({"nodes": nodes, "attributes": attributes})
    except Exception as e:  # noqa: BLE001 - whatever argument does not pickle
        raise RuntimeError(f"kiln: cannot save this graph: {e}") from e


def _graph_from_state(data: bytes) -> fx.GraphModule:
    state = pickle.loads(data)
    graph = fx.Graph()
    built: list[fx.Node] = []

    def node_of(value: Any) -> Any:
        if isinstance(value, _Ref):
            return built[value.index]
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(node_of(v) for v in value)
        if isinstance(value, dict):
            return {k: node_of(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(node_of(value.start), node_of(value.stop), node_of(value.step))
        return value

    for op, name, target, args, kwargs in state["nodes"]:
        if op == "call_function":
            target = _resolve(target)
        node = graph.create_node(op, target, node_of(args), node_of(kwargs),
                                 name=None if op == "output" else name)
        if op != "output" and node.name != name:
            raise RuntimeError(f"kiln: node {name!r} of a saved graph came back as "
                               f"{node.name!r}; compile and save it again")
        built.append(node)
    root = torch.nn.Module()
    for target, value in state["attributes"].items():
        _set_attr(root, target, value)
    return fx.GraphModule(root, graph)


def _qualified_name(target: Any) -> str:
    from torch.fx.node import _get_qualified_name
    name = _get_qualified_name(target)
    try:
        found = _resolve(name)
    except (ImportError, AttributeError):
        found = None
    if found is not target and found != target:
        raise RuntimeError(f"kiln: cannot save a graph calling {target!r}: it is not found "
                           f"again by its name {name!r}")
    return name


def _resolve(name: str) -> Any:
    """The object a qualified name ("torch.nn.functional.relu",
    "_operator.getitem", "getattr") names."""
    import builtins
    import importlib
    parts = name.split(".")
    if len(parts) == 1:
        return getattr(builtins, name)
    for split in range(len(parts) - 1, 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            value = getattr(value, part)
        return value
    raise ImportError(f"no module for {name!r}")


def _set_attr(root: torch.nn.Module, target: str, value: Any) -> None:
    owner, name = holder_of(root, target)
    if isinstance(value, torch.nn.Parameter):
        owner.register_parameter(name, value)
    elif isinstance(value, torch.Tensor):
        owner.register_buffer(name, value)
    else:
        setattr(owner, name, value)
