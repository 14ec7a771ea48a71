"""The lowering cache: lowered and partitioned graphs kept on disk, so a
warm compile (a new process, a restarted daemon) skips make_fx and the
partitioner.

What is cached is what compile_graph builds before it talks to the daemon
about a partition: the `split` GraphModule (the functional ATen graph with
eager nodes and `fused_<n>` submodules) with every node's "val" metadata,
and which inputs are weights. Weights are graph inputs, so their values are
not in an entry: KilnSubgraph hashes and uploads them as on a miss.

The key (SHA-256) covers everything that decides that result: the Dynamo
graph's nodes (what its generated code says) and its small get_attr
tensors, each example input's shape, strides, dtype, device and flags, the
weight positions, torch's version, the kiln client's own source, the
options that shape lowering and partitioning, and the daemon's
capabilities. Graphs whose result those do not pin down (call_module
nodes, call targets outside torch, large get_attr tensors, arguments with
no plain-data form) are not cached; neither are graphs after a daemon
rejection moved nodes to eager, nor the AOTAutograd and symbolic paths.

Entries live in <daemon's cache dir>/lowered/<key>.klow (container format in
cache_files.py), written atomically. Anything wrong with one (header,
checksum, payload, a graph that does not fit the inputs) is a miss, logged
at debug, and the entry is deleted. model_caching=False (or
KILN_MODEL_CACHING=0), or KILN_LOWERING_CACHE=0 alone, turns it off.

The payload is a pickle. That is acceptable because the directory is the
user's own (lowered/ is created 0700 and not used if anyone else could
write to it), and it is a pickle of plain containers only (dicts, lists,
tuples, str, bytes, numbers; targets, dtypes and devices are stored by
name) read by an unpickler that refuses every global, so reading an entry
cannot run code.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import itertools
import logging
import math
import operator
import os
import pickle
import stat
import sys
import weakref
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.fx._lazy_graph_module import _LazyGraphModule, _make_graph_module
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, is_fake

from kiln import cache_files, daemon
from kiln.connection import Connection
from kiln.options import KilnOptions

log = logging.getLogger(__name__)

ENV_SWITCH = "KILN_LOWERING_CACHE"
# get_attr tensors above this are not hashed or stored: the graph is not cached.
MAX_ATTR_BYTES = 1 << 20
# A payload past this means something large slipped in: not stored.
MAX_PAYLOAD_BYTES = 64 << 20

_MISSING = ("-",)  # node without a "val"
_write_counter = itertools.count()


class Uncacheable(Exception):
    """The graph (or its lowering) is not one the cache takes."""


class BadEntry(Exception):
    """An entry that must not be used."""


@dataclasses.dataclass
class CachedLowering:
    split: fx.GraphModule             # as partition.partition left it
    constant_inputs: frozenset[int]   # LoweredGraph.constant_inputs
    cold_s: float                     # what lowering and partitioning took when stored


# ---- where -------------------------------------------------------------------

# Connection -> (generation, the daemon's cache dir) : one GetStats per session.
_daemon_dirs: "weakref.WeakKeyDictionary[Connection, tuple[int, str]]" = (
    weakref.WeakKeyDictionary())


def _daemon_cache_dir(conn: Connection, opts: KilnOptions) -> str:
    """The running daemon's cache directory, else the one a daemon started
    here would use."""
    known = _daemon_dirs.get(conn)
    if known is not None and known[0] == conn.generation:
        return known[1]
    directory = ""
    try:
        directory = conn.stats().cache_dir
    except Exception as e:  # noqa: BLE001 - no answer: use the default
        log.debug("lowering cache: GetStats failed (%s); using the default directory", e)
    directory = directory or opts.cache_dir or daemon.default_cache_dir()
    _daemon_dirs[conn] = (conn.generation, directory)
    return directory


def _usable_dir(path: str) -> bool:
    """Ours alone: owned by this user, writable by nobody else."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def enabled(opts: KilnOptions) -> bool:
    env = os.environ.get(ENV_SWITCH, "").strip().lower()
    return bool(opts.model_caching) and env not in ("0", "false", "no", "off")


# ---- the key -----------------------------------------------------------------

_TORCH_MODULES = ("torch", "_operator", "operator", "math", "builtins")


def _torch_owned(target: Any) -> bool:
    """Whether a Dynamo call target is torch's (or Python's), so that its name
    and torch's version say what it does."""
    if isinstance(target, str):  # call_method: a tensor method by name
        return True
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return target.namespace in ("aten", "prims")
    module = getattr(target, "__module__", None)
    if module is None:
        module = getattr(getattr(target, "__objclass__", None), "__module__", None)
    return isinstance(module, str) and module.split(".")[0] in _TORCH_MODULES


def _target_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    module = getattr(target, "__module__", None) or getattr(
        getattr(target, "__objclass__", None), "__module__", "?")
    return f"{module}.{getattr(target, '__qualname__', getattr(target, '__name__', '?'))}"


_PLAIN = (bool, int, float, complex, str)


def _argument_text(value: Any) -> Any:
    """An argument of a Dynamo node as plain data; Uncacheable for anything
    whose repr would not say exactly what it is (functions, modules, ...)."""
    if isinstance(value, fx.Node):
        return ("%", value.name)
    if value is None or value is Ellipsis or type(value) in _PLAIN:
        return repr(value)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return (type(value).__name__, [_argument_text(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(repr(k), _argument_text(v)) for k, v in value.items()])
    if isinstance(value, slice):
        return ("slice", _argument_text(value.start), _argument_text(value.stop),
                _argument_text(value.step))
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(value).__name__, str(value))
    raise Uncacheable(f"argument {value!r} of type {type(value).__name__}")


def _graph_text(gm: fx.GraphModule) -> list:
    """gm's graph as plain data: every node's op, name, target and arguments
    (what gm.code says, without generating it: Dynamo's graph modules
    generate their code lazily, and a cache hit never needs it)."""
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_module":
            raise Uncacheable(f"call_module node {node.name!r} (module state is not in the code)")
        if node.op in ("call_function", "call_method") and not _torch_owned(node.target):
            raise Uncacheable(f"node {node.name!r} calls {node.target!r}, not a torch function")
        out.append((node.op, node.name, _target_name(node.target),
                    _argument_text(node.args), _argument_text(dict(node.kwargs))))
    return out


def _fetch(module: torch.nn.Module, target: str) -> Any:
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _tensor_bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


def _small_real_tensor(value: Any, what: str) -> torch.Tensor:
    if type(value) not in (torch.Tensor, torch.nn.Parameter) or is_fake(value) \
            or value.layout != torch.strided:
        raise Uncacheable(f"{what} is not a plain tensor")
    if value.numel() * value.element_size() > MAX_ATTR_BYTES:
        raise Uncacheable(f"{what} is larger than {MAX_ATTR_BYTES} bytes")
    return value


@functools.lru_cache(maxsize=1)
def _client_fingerprint() -> str:
    """SHA-256 over the kiln package's Python sources: editing the client
    invalidates every entry."""
    root = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for directory, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()


def key_for(gm: fx.GraphModule, example_inputs: Sequence[Any], constants: frozenset[int],
            opts: KilnOptions, capabilities: bytes) -> str:
    """The entry key of one compile; raises Uncacheable for graphs the cache
    does not take."""
    digest = hashlib.sha256()

    def put(*parts: Any) -> None:
        digest.update(repr(parts).encode())
        digest.update(b"\0")

    put("kiln lowering", cache_files.LOWERING_FORMAT_VERSION, torch.__version__,
        sys.version_info[:2], _client_fingerprint(), str(torch.get_default_dtype()))
    put("graph", _graph_text(gm))
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            try:
                t = _small_real_tensor(_fetch(gm, node.target), f"get_attr {node.target!r}")
            except AttributeError:
                raise Uncacheable(f"get_attr {node.target!r} not found") from None
            put("attr", node.target, tuple(t.shape), t.stride(), t.storage_offset(),
                str(t.dtype), str(t.device), t.requires_grad)
            digest.update(_tensor_bytes(t))
    storages: dict[int, int] = {}
    for i, x in enumerate(example_inputs):
        if isinstance(x, bool) or not isinstance(x, (int, torch.Tensor)):
            raise Uncacheable(f"input {i} is a {type(x).__name__}")
        if isinstance(x, int):
            put("int", i, x)
            continue
        if type(x) not in (torch.Tensor, torch.nn.Parameter) or x.layout != torch.strided:
            raise Uncacheable(f"input {i} is a {type(x).__name__} ({x.layout})")
        # Inputs sharing storage are traced as aliases: part of the result.
        alias = storages.setdefault(x.untyped_storage().data_ptr(), i)
        put("tensor", i, tuple(x.shape), x.stride(), x.storage_offset(), str(x.dtype),
            str(x.device), x.requires_grad, i in constants, x._is_view(), x.is_conj(),
            x.is_neg(), alias)
    put("constants", sorted(constants))
    put("options", tuple(opts.decompositions), tuple(opts.disabled_ops),
        int(opts.min_partition_size))
    put("capabilities", hashlib.sha256(capabilities).hexdigest())
    return digest.hexdigest()


# ---- encoding the split graph as plain data ----------------------------------

_TORCH_VALUE_TYPES = (torch.dtype, torch.layout, torch.memory_format)


def _encode_target(target: Any) -> tuple:
    if isinstance(target, torch._ops.OpOverload):
        return ("op", target.namespace, target._opname, target._overloadname)
    if target is operator.getitem:
        return ("getitem",)
    raise Uncacheable(f"call target {target!r}")


def _encode_value(value: Any, index: dict[fx.Node, int]) -> Any:
    if isinstance(value, fx.Node):
        return ("n", index[value])
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else ("f", repr(value))
    # FX keeps lists as immutable_list; Size and other tuples as tuples
    # (namedtuples keep their type, which has no plain-data form).
    if isinstance(value, list) or (isinstance(value, tuple) and not hasattr(value, "_fields")):
        return ("l" if isinstance(value, list) else "t",
                [_encode_value(v, index) for v in value])
    if isinstance(value, _TORCH_VALUE_TYPES):
        return ("torch", str(value).removeprefix("torch."))
    if isinstance(value, torch.device):
        return ("device", str(value))
    raise Uncacheable(f"argument {value!r} of type {type(value).__name__}")


def _encode_val(val: Any) -> Any:
    """A node's "val" metadata: shape, strides, dtype and device of each tensor."""
    if isinstance(val, torch.Tensor):
        if any(not isinstance(d, int) for d in (*val.shape, *val.stride())):
            raise Uncacheable("symbolic tensor metadata")
        return ("T", str(val.dtype).removeprefix("torch."), tuple(val.shape), tuple(val.stride()),
                str(val.device))
    if val is None or type(val) in (bool, int):
        return val
    if type(val) is float:
        return ("f", repr(val))
    if type(val) in (list, tuple):
        return ("l" if type(val) is list else "t", [_encode_val(v) for v in val])
    raise Uncacheable(f"node metadata of type {type(val).__name__}")


def _encode_graph(graph: fx.Graph) -> list[tuple]:
    index: dict[fx.Node, int] = {}
    nodes = []
    for i, node in enumerate(graph.nodes):
        if node.op == "call_function":
            target: Any = _encode_target(node.target)
        elif node.op in ("placeholder", "output", "get_attr", "call_module"):
            target = node.target
        else:
            raise Uncacheable(f"node {node.name!r}: FX op {node.op}")
        val = _encode_val(node.meta["val"]) if "val" in node.meta else _MISSING
        nodes.append((node.op, node.name, target, _encode_value(list(node.args), index),
                      [(k, _encode_value(v, index)) for k, v in node.kwargs.items()], val))
        index[node] = i
    return nodes


def _encode_split(split: fx.GraphModule, constant_inputs: frozenset[int],
                  key: str, cold_s: float) -> dict:
    from kiln.subgraph import KilnSubgraph
    graphs = {"": _encode_graph(split.graph)}
    tensors = []

    def attrs(owner: str, module: torch.nn.Module, graph: fx.Graph) -> None:
        for node in graph.nodes:
            if node.op == "get_attr":
                t = _small_real_tensor(_fetch(module, node.target), f"get_attr {node.target!r}")
                tensors.append((owner, node.target, str(t.dtype).removeprefix("torch."),
                                tuple(t.shape), tuple(t.stride()), _tensor_bytes(t)))

    attrs("", split, split.graph)
    for node in split.graph.nodes:
        if node.op != "call_module":
            continue
        module = getattr(split, node.target)
        if isinstance(module, KilnSubgraph):
            module = module.eager
        if not isinstance(module, fx.GraphModule) or "." in node.target:
            raise Uncacheable(f"submodule {node.target!r} is not a fused partition")
        if any(n.op == "call_module" for n in module.graph.nodes):
            raise Uncacheable(f"submodule {node.target!r} has submodules")
        graphs[node.target] = _encode_graph(module.graph)
        attrs(node.target, module, module.graph)
    return {"key": key, "cold_s": cold_s, "constant_inputs": sorted(constant_inputs),
            "graphs": graphs, "tensors": tensors}


# ---- decoding ----------------------------------------------------------------


class _Decoder:
    def __init__(self) -> None:
        self.fake_mode = FakeTensorMode()
        self.targets: dict[tuple, Any] = {}
        self.vals: dict[tuple, torch.Tensor] = {}

    def torch_value(self, name: str) -> Any:
        value = getattr(torch, name)
        if not isinstance(value, _TORCH_VALUE_TYPES):
            raise BadEntry(f"torch.{name} is not a dtype, layout or memory format")
        return value

    def target(self, enc: Any) -> Any:
        target = self.targets.get(enc)
        if target is None:
            if enc == ("getitem",):
                target = operator.getitem
            elif enc[0] == "op" and len(enc) == 4:
                target = getattr(getattr(getattr(torch.ops, enc[1]), enc[2]), enc[3])
                if not isinstance(target, torch._ops.OpOverload):
                    raise BadEntry(f"{enc} is not an op overload")
            else:
                raise BadEntry(f"call target {enc!r}")
            self.targets[enc] = target
        return target

    def value(self, enc: Any, nodes: list[fx.Node]) -> Any:
        if type(enc) is not tuple:
            return enc
        tag = enc[0]
        if tag == "n":
            return nodes[enc[1]]
        if tag == "l":
            return [self.value(v, nodes) for v in enc[1]]
        if tag == "t":
            return tuple(self.value(v, nodes) for v in enc[1])
        if tag == "f":
            return float(enc[1])
        if tag == "torch":
            return self.torch_value(enc[1])
        if tag == "device":
            return torch.device(enc[1])
        raise BadEntry(f"argument tag {tag!r}")

    def val(self, enc: Any) -> Any:
        if type(enc) is not tuple:
            return enc
        tag = enc[0]
        if tag == "T":
            fake = self.vals.get(enc)
            if fake is None:
                _, dtype, shape, stride, device = enc
                # A meta tensor wrapped directly: creating it through the fake
                # mode's dispatch costs milliseconds per tensor.
                meta = torch.empty_strided(shape, stride, dtype=self.torch_value(dtype),
                                           device="meta")
                fake = FakeTensor(self.fake_mode, meta, torch.device(device))
                self.vals[enc] = fake
            return fake
        if tag == "l":
            return [self.val(v) for v in enc[1]]
        if tag == "t":
            return tuple(self.val(v) for v in enc[1])
        if tag == "f":
            return float(enc[1])
        raise BadEntry(f"metadata tag {tag!r}")

    def graph(self, encoded: list) -> fx.Graph:
        graph = fx.Graph()
        nodes: list[fx.Node] = []
        for op, name, target, args, kwargs, val in encoded:
            if op == "call_function":
                target = self.target(target)
            node = graph.create_node(op, target, tuple(self.value(args, nodes)),
                                     {k: self.value(v, nodes) for k, v in kwargs},
                                     name=None if op == "output" else name)
            if node.name != name:
                raise BadEntry(f"node {name!r} came back as {node.name!r}")
            if val != _MISSING:
                node.meta["val"] = self.val(val)
            nodes.append(node)
        graph.lint()
        return graph


def _decode_split(payload: dict) -> fx.GraphModule:
    decoder = _Decoder()
    graphs = payload["graphs"]
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    for owner, target, dtype, shape, stride, raw in payload["tensors"]:
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        t = torch.empty_strided(shape, stride, dtype=decoder.torch_value(dtype))
        t.copy_(flat.view(t.dtype).reshape(shape))
        tensors.setdefault(owner, {})[target] = t

    def root_of(owner: str) -> torch.nn.Module:
        """A module holding `owner`'s get_attr tensors (GraphModule copies them)."""
        root = torch.nn.Module()
        for target, t in tensors.get(owner, {}).items():
            *path, leaf = target.split(".")
            holder = root
            for part in path:
                if not hasattr(holder, part):
                    holder.add_module(part, torch.nn.Module())
                holder = getattr(holder, part)
            setattr(holder, leaf, t)
        return root

    # The fused submodules go in after the top module is built: building it
    # with them would generate their code a second time.
    root = root_of("")
    for name in graphs:
        if name:
            root.add_module(name, torch.nn.Module())
    # Lazy: their Python code is generated on first call, not here (a
    # fused submodule only runs if its partition falls back to eager).
    split = _make_graph_module(root, decoder.graph(graphs[""]), graph_module_cls=_LazyGraphModule)
    for name, encoded in graphs.items():
        if name:
            setattr(split, name, _make_graph_module(root_of(name), decoder.graph(encoded),
                                                    graph_module_cls=_LazyGraphModule))
    return split


def _check_fits(split: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """The restored graph takes these inputs (as lowering.lower checks)."""
    placeholders = [n for n in split.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise BadEntry(f"{len(placeholders)} placeholders for {len(example_inputs)} inputs")
    for node, example in zip(placeholders, example_inputs):
        if not isinstance(example, torch.Tensor):
            continue
        val = node.meta.get("val")
        if (not isinstance(val, torch.Tensor) or val.dtype != example.dtype
                or tuple(val.shape) != tuple(example.shape)):
            raise BadEntry(f"input {node.name!r} does not match its example input")


class _PlainUnpickler(pickle.Unpickler):
    """Plain containers and scalars only: an entry never names a class or
    function, so nothing in one can run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"entry names {module}.{name}")


# ---- the cache ---------------------------------------------------------------


class LoweringCache:
    """One compile's entry: its key and where it lives."""

    def __init__(self, directory: str, key: str, constants: frozenset[int]):
        self.directory = directory
        self.key = key
        self.constants = constants  # positions of the weights, as lowering finds them
        self.path = os.path.join(directory, key + cache_files.LOWERING_SUFFIX)

    def load(self, example_inputs: Sequence[Any]) -> CachedLowering | None:
        """The cached lowering, or None (a miss; a bad entry is deleted)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.debug("lowering cache: cannot read %s: %s", self.path, e)
            return None
        try:
            payload = _PlainUnpickler(io.BytesIO(
                cache_files.unpack_lowering(self.path, data))).load()
            if not isinstance(payload, dict) or payload.get("key") != self.key:
                raise BadEntry("entry is for another key")
            if frozenset(payload["constant_inputs"]) != self.constants:
                raise BadEntry("weight positions differ")
            split = _decode_split(payload)
            _check_fits(split, example_inputs)
            cold_s = float(payload["cold_s"])
        except Exception as e:  # noqa: BLE001 - any bad entry is a miss, never an error
            log.debug("lowering cache: ignoring and deleting %s: %s: %s", self.path,
                      type(e).__name__, e)
            cache_files.remove(self.path)
            return None
        try:
            os.utime(self.path)  # its last use, for `kiln cache prune`
        except OSError:
            pass
        return CachedLowering(split, self.constants, cold_s)

    def store(self, split: fx.GraphModule, constant_inputs: frozenset[int],
              cold_s: float) -> None:
        """Writes the entry (best effort: a failure is logged at debug)."""
        try:
            payload = pickle.dumps(_encode_split(split, constant_inputs, self.key, cold_s),
                                   protocol=pickle.HIGHEST_PROTOCOL)
        except Uncacheable as e:
            log.debug("lowering cache: not storing graph %s: %s", self.key[:16], e)
            return
        if len(payload) > MAX_PAYLOAD_BYTES:
            log.debug("lowering cache: not storing graph %s: %d bytes", self.key[:16],
                      len(payload))
            return
        data = cache_files.pack_lowering(payload, torch.__version__)
        tmp = f"{self.path}.tmp.{os.getpid()}.{next(_write_counter)}"
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        except OSError as e:
            log.debug("lowering cache: cannot write %s: %s", self.path, e)
            cache_files.remove(tmp)
            return
        log.debug("lowering cache: stored graph %s (%d bytes)", self.key[:16], len(data))


def for_graph(gm: fx.GraphModule, example_inputs: Sequence[Any], opts: KilnOptions,
              conn: Connection, constant_inputs: frozenset[int] | None) -> LoweringCache | None:
    """This compile's cache entry, or None when the cache is off or the graph
    is not one it takes."""
    if not enabled(opts):
        return None
    try:
        constants = _constant_positions(gm, example_inputs, constant_inputs)
        key = key_for(gm, example_inputs, constants, opts,
                      conn.capabilities().SerializeToString(deterministic=True))
    except Uncacheable as e:
        log.debug("lowering cache: graph not cacheable: %s", e)
        return None
    cache_dir = _daemon_cache_dir(conn, opts)
    directory = os.path.join(cache_dir, cache_files.LOWERING_DIR)
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as e:
        log.debug("lowering cache: cannot create %s: %s", directory, e)
        return None
    if not _usable_dir(directory):
        log.debug("lowering cache: %s is not this user's alone; not using it", directory)
        return None
    return LoweringCache(directory, key, constants)


def _constant_positions(gm: fx.GraphModule, example_inputs: Sequence[Any],
                        constant_inputs: frozenset[int] | None) -> frozenset[int]:
    from kiln import lowering
    placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    if placeholders != len(example_inputs):
        raise Uncacheable(f"{placeholders} placeholders for {len(example_inputs)} inputs")
    return lowering.constant_positions(gm, example_inputs, constant_inputs)

