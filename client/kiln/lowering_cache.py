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

The key is lowering_key.py's; the graph's plain-data form and the reading
and writing of payloads are lowering_codec.py's. This module decides where
entries live and when one is used.

The payload is a pickle. That is acceptable because the directory is the
user's own (lowered/ is created 0700 and not used if anyone else could
write to it), and it is a pickle of plain containers only (dicts, lists,
tuples, str, bytes, numbers; targets, dtypes and devices are stored by
name) read by an unpickler that refuses every global, so reading an entry
cannot run code.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import stat
import weakref
from typing import Any, Sequence

import torch
import torch.fx as fx

from kiln import cache_files, daemon, lowering_codec
from kiln.connection import Connection
from kiln.lowering_codec import BadEntry, Uncacheable
from kiln.lowering_key import key_for
from kiln.options import KilnOptions

log = logging.getLogger(__name__)

ENV_SWITCH = "KILN_LOWERING_CACHE"
# A payload past this means something large slipped in: not stored.
MAX_PAYLOAD_BYTES = 64 << 20

_write_counter = itertools.count()


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
            payload = lowering_codec.loads(cache_files.unpack_lowering(self.path, data))
            if not isinstance(payload, dict) or payload.get("key") != self.key:
                raise BadEntry("entry is for another key")
            if frozenset(payload["constant_inputs"]) != self.constants:
                raise BadEntry("weight positions differ")
            split = lowering_codec.decode_split(payload)
            lowering_codec.check_fits(split, example_inputs)
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
            payload = lowering_codec.dumps(
                lowering_codec.encode_split(split, constant_inputs, self.key, cold_s))
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

