"""The lowering cache's key: SHA-256 over everything that decides what
lowering and partitioning make of a Dynamo graph (see lowering_cache.py for
the list), or Uncacheable for a graph whose result those do not pin down.
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
from typing import Any, Sequence

import torch
import torch.fx as fx

from kiln import cache_files
from kiln.fx_attrs import fetch_attr
from kiln.lowering_codec import Uncacheable, small_real_tensor, tensor_bytes
from kiln.options import KilnOptions

_TORCH_MODULES = ("torch", "_operator", "operator", "math", "builtins")


def _torch_owned(target: Any) -> bool:
    """Whether a Dynamo call target is torch's (or Python's), so that its name
    and torch's version say what it does."""
    if isinstance(target, str):  # call_method: a tensor method by name
        return True
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        # "aten.add.Tensor", "aten.add" (a packet has no .namespace)
        return str(target).split(".", 1)[0] in ("aten", "prims")
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
                t = small_real_tensor(fetch_attr(gm, node.target), f"get_attr {node.target!r}")
            except AttributeError:
                raise Uncacheable(f"get_attr {node.target!r} not found") from None
            put("attr", node.target, tuple(t.shape), t.stride(), t.storage_offset(),
                str(t.dtype), str(t.device), t.requires_grad)
            digest.update(tensor_bytes(t))
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
        int(opts.min_partition_size), bool(opts.auto_decompose))
    put("capabilities", hashlib.sha256(capabilities).hexdigest())
    return digest.hexdigest()
