"""Reading kilnd's on-disk compiled-graph cache directly, without a daemon.

The layout and the entry format are the ones cache/artifact_store.cc writes:
<dir>/artifacts/<key[0:2]>/<key>.kart holds

    magic b"KILNART\\0" | u32 format version | u32 length + runtime version |
    u32 length + CPU features | u64 payload size | 64 hex chars SHA-256 of
    the payload | payload

with integers in the writer's byte order (kilnd runs on little-endian hosts
only). Writers put a whole entry in `<entry>.tmp.<pid>.<n>` and rename it
into place. An entry's mtime is its last use: the daemon sets it on every
cache hit and evicts the least recently used entries past its size cap.

The client's own entries, lowered and partitioned graphs
(kiln/lowering_cache.py), live beside them in <dir>/lowered/<key>.klow:

    magic b"KILNLOW\0" | u32 format version | u32 length + torch version |
    u64 payload size | 64 hex chars SHA-256 of the payload | payload

(little-endian), written the same way (`<entry>.tmp.<pid>.<n>`, then a
rename); a hit sets the mtime. The torch version is for people reading
the directory: the key already covers it.

Nothing here deletes a file outside those layouts.
"""
from __future__ import annotations

import hashlib
import os
import struct
import time
from dataclasses import dataclass

MAGIC = b"KILNART\0"
# 2: a GMAC nonce and tag follow the checksum (only a daemon holding the
# directory's key can check them; `verify` checks the checksum).
FORMAT_VERSION = 2
# The reader in artifact_store.cc refuses longer header strings.
_MAX_HEADER_STRING = 4096
_MAX_HEADER_BYTES = 8 + 4 + 2 * (4 + _MAX_HEADER_STRING) + 8 + 64 + 12 + 16
_TEMPORARY_MARK = ".kart.tmp."
# As in artifact_store.cc: a temporary this old belongs to a writer that died.
STALE_TEMPORARY_S = 3600.0
DEFAULT_MAX_MB = 2048


LOWERING_DIR = "lowered"
LOWERING_MAGIC = b"KILNLOW\0"
LOWERING_FORMAT_VERSION = 1
LOWERING_SUFFIX = ".klow"
_LOWERING_TEMPORARY_MARK = LOWERING_SUFFIX + ".tmp."
_LOWERING_HEADER = struct.Struct("<8sII")  # magic, format version, torch version length


class CacheDirError(RuntimeError):
    """The cache directory is missing or cannot be read."""


@dataclass(frozen=True)
class Entry:
    """One cache entry as found on disk; the header fields are None when
    `header_error` says why they could not be read."""

    path: str
    key: str
    size: int  # bytes of the whole file
    mtime: float  # last use (the LRU clock)
    header_error: str | None = None
    format_version: int | None = None
    runtime_version: str | None = None
    cpu_features: str | None = None
    payload_size: int | None = None
    checksum: str | None = None
    header_size: int = 0


def _parse_header(path: str, head: bytes, size: int, mtime: float) -> Entry:
    key = os.path.basename(path)[:-len(".kart")]
    pos = 0

    def take(n: int) -> bytes | None:
        nonlocal pos
        if len(head) - pos < n:
            return None
        out = head[pos:pos + n]
        pos += n
        return out

    def take_string() -> str | None:
        raw = take(4)
        if raw is None:
            return None
        (n,) = struct.unpack("<I", raw)
        if n > _MAX_HEADER_STRING:
            return None
        data = take(n)
        return None if data is None else data.decode("utf-8", errors="replace")

    def bad(reason: str, **fields) -> Entry:
        return Entry(path, key, size, mtime, header_error=reason, **fields)

    magic = take(8)
    if magic != MAGIC:
        return bad("bad magic")
    raw = take(4)
    if raw is None:
        return bad("truncated header")
    (fmt,) = struct.unpack("<I", raw)
    if fmt != FORMAT_VERSION:
        return bad("other format version", format_version=fmt)
    version = take_string()
    features = take_string()
    raw_size = take(8)
    checksum = take(64)
    mac = take(12 + 16)
    if None in (version, features, raw_size, checksum, mac):
        return bad("truncated header", format_version=fmt, runtime_version=version,
                   cpu_features=features)
    (payload_size,) = struct.unpack("<Q", raw_size)
    return Entry(path, key, size, mtime, format_version=fmt, runtime_version=version,
                 cpu_features=features, payload_size=payload_size,
                 checksum=checksum.decode("ascii", errors="replace"), header_size=pos)


def read_entry(path: str) -> Entry:
    """The entry at `path` from its header alone (cheap: no checksum)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            head = f.read(_MAX_HEADER_BYTES)
    except OSError as e:
        key = os.path.basename(path)[:-len(".kart")]
        return Entry(path, key, 0, 0.0, header_error=f"unreadable: {e.strerror}")
    return _parse_header(path, head, st.st_size, st.st_mtime)


def check(entry: Entry) -> str | None:
    """Why the daemon would reject `entry` whatever its runtime version and
    CPU: the reasons artifact_store.cc logs. None when it is sound."""
    if entry.header_error is not None:
        return entry.header_error
    if entry.size - entry.header_size != entry.payload_size:
        return "truncated or oversized payload"
    digest = hashlib.sha256()
    try:
        with open(entry.path, "rb") as f:
            f.seek(entry.header_size)
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except OSError as e:
        return f"unreadable: {e.strerror}"
    if digest.hexdigest() != entry.checksum:
        return "checksum mismatch"
    return None


def _check_dir(cache_dir: str) -> None:
    if not os.path.isdir(cache_dir):
        raise CacheDirError(f"no cache directory at {cache_dir}")
    if not os.access(cache_dir, os.R_OK | os.X_OK):
        raise CacheDirError(f"cannot read the cache directory {cache_dir}")


def _shards(cache_dir: str) -> list[str]:
    _check_dir(cache_dir)
    root = os.path.join(cache_dir, "artifacts")
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []  # a cache no daemon has written to yet
    except OSError as e:
        raise CacheDirError(f"cannot read {root}: {e.strerror}") from e
    return [os.path.join(root, n) for n in sorted(names)
            if len(n) == 2 and os.path.isdir(os.path.join(root, n))]


def _files(cache_dir: str):
    for shard in _shards(cache_dir):
        try:
            names = os.listdir(shard)
        except OSError:
            continue  # removed under us, or not ours to read
        for name in names:
            yield os.path.join(shard, name), name


def list_entries(cache_dir: str) -> list[Entry]:
    """Every entry file in the store's layout, headers read, unordered."""
    return [read_entry(path) for path, name in _files(cache_dir)
            if name.endswith(".kart") and os.path.isfile(path)]


def temporaries(cache_dir: str, older_than_s: float = 0.0) -> list[str]:
    """Writers' temporaries (the daemon's and the lowering cache's) whose
    mtime is at least `older_than_s` ago."""
    cutoff = time.time() - older_than_s
    out = []
    for path, name in list(_files(cache_dir)) + _lowering_files(cache_dir):
        if _TEMPORARY_MARK not in name and _LOWERING_TEMPORARY_MARK not in name:
            continue
        try:
            if os.stat(path).st_mtime <= cutoff:
                out.append(path)
        except OSError:
            continue
    return out


def remove(path: str) -> bool:
    """Deletes one file; False if it was already gone or cannot be removed."""
    try:
        os.remove(path)
        return True
    except OSError:
        return False


def configured_max_mb() -> tuple[int | None, str]:
    """The cap in MiB (0: none) a daemon started from this environment gets,
    and where it comes from; None when kilnd would refuse the value. A
    running daemon may have been given --cache-max-mb instead."""
    env = os.environ.get("KILN_CACHE_MAX_MB")
    if not env:
        return DEFAULT_MAX_MB, "default"
    if env.isdigit():
        return int(env), "KILN_CACHE_MAX_MB"
    return None, f"KILN_CACHE_MAX_MB={env!r} is not a number of MiB; kilnd refuses it"


# ---- The client's lowering entries (lowered/<key>.klow) ---------------------


@dataclass(frozen=True)
class LoweringEntry:
    """One lowering-cache entry as found on disk; the header fields are None
    when `header_error` says why they could not be read."""

    path: str
    key: str
    size: int
    mtime: float
    header_error: str | None = None
    format_version: int | None = None
    torch_version: str | None = None
    payload_size: int | None = None
    checksum: str | None = None
    header_size: int = 0


def pack_lowering(payload: bytes, torch_version: str) -> bytes:
    """A whole lowering entry: header, then `payload`."""
    version = torch_version.encode()
    return (_LOWERING_HEADER.pack(LOWERING_MAGIC, LOWERING_FORMAT_VERSION, len(version))
            + version + struct.pack("<Q", len(payload))
            + hashlib.sha256(payload).hexdigest().encode("ascii") + payload)


def _parse_lowering_header(path: str, head: bytes, size: int, mtime: float) -> LoweringEntry:
    key = os.path.basename(path)[:-len(LOWERING_SUFFIX)]

    def bad(reason: str, **fields) -> LoweringEntry:
        return LoweringEntry(path, key, size, mtime, header_error=reason, **fields)

    if len(head) < _LOWERING_HEADER.size:
        return bad("bad magic" if not LOWERING_MAGIC.startswith(head[:8]) else "truncated header")
    magic, fmt, n = _LOWERING_HEADER.unpack_from(head)
    if magic != LOWERING_MAGIC:
        return bad("bad magic")
    if fmt != LOWERING_FORMAT_VERSION:
        return bad("other format version", format_version=fmt)
    pos = _LOWERING_HEADER.size
    if n > _MAX_HEADER_STRING or len(head) < pos + n + 8 + 64:
        return bad("truncated header", format_version=fmt)
    version = head[pos:pos + n].decode("utf-8", errors="replace")
    (payload_size,) = struct.unpack_from("<Q", head, pos + n)
    checksum = head[pos + n + 8:pos + n + 8 + 64].decode("ascii", errors="replace")
    return LoweringEntry(path, key, size, mtime, format_version=fmt, torch_version=version,
                         payload_size=payload_size, checksum=checksum,
                         header_size=pos + n + 8 + 64)


def unpack_lowering(path: str, data: bytes) -> bytes:
    """The payload of a whole lowering entry read from `path`; ValueError
    saying what is wrong (the same reasons check_lowering gives)."""
    entry = _parse_lowering_header(path, data[:_LOWERING_HEADER.size + _MAX_HEADER_STRING + 72],
                                   len(data), 0.0)
    if entry.header_error is not None:
        raise ValueError(entry.header_error)
    payload = data[entry.header_size:]
    if len(payload) != entry.payload_size:
        raise ValueError("truncated or oversized payload")
    if hashlib.sha256(payload).hexdigest() != entry.checksum:
        raise ValueError("checksum mismatch")
    return payload


def _lowering_files(cache_dir: str) -> list[tuple[str, str]]:
    root = os.path.join(cache_dir, LOWERING_DIR)
    try:
        return [(os.path.join(root, n), n) for n in os.listdir(root)]
    except OSError:
        return []  # none written yet, or not ours to read


def list_lowerings(cache_dir: str) -> list[LoweringEntry]:
    """Every lowering entry, headers read, unordered."""
    _check_dir(cache_dir)
    out = []
    for path, name in _lowering_files(cache_dir):
        if not name.endswith(LOWERING_SUFFIX) or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                head = f.read(_LOWERING_HEADER.size + _MAX_HEADER_STRING + 72)
        except OSError as e:
            out.append(LoweringEntry(path, name[:-len(LOWERING_SUFFIX)], 0, 0.0,
                                     header_error=f"unreadable: {e.strerror}"))
            continue
        out.append(_parse_lowering_header(path, head, st.st_size, st.st_mtime))
    return out


def check_lowering(entry: LoweringEntry) -> str | None:
    """Why the lowering cache would ignore `entry` on its container alone
    (header, size, checksum); None when it is sound."""
    if entry.header_error is not None:
        return entry.header_error
    if entry.size - entry.header_size != entry.payload_size:
        return "truncated or oversized payload"
    try:
        with open(entry.path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"unreadable: {e.strerror}"
    try:
        unpack_lowering(entry.path, data)
    except ValueError as e:
        return str(e)
    return None


# ---- Weights the daemon saved (constants/<xx>/<name>.kcst) --------------------
# Layout and header as cache/constant_files.h writes them: a 4096-byte
# header (magic, u32 format version, u32 key length, u64 payload size, u64
# zero, the key, a MAC in its last 32 bytes) then the payload. What checks
# the bytes is the daemon's when it reads them (a client's weight: the
# SHA-256 its name says; a derived one: the MAC under the directory's key,
# which this module does not read); this module checks the container only.

CONSTANT_DIR = "constants"
CONSTANT_MAGIC = b"KILNCST\0"
CONSTANT_FORMAT_VERSION = 2
CONSTANT_SUFFIX = ".kcst"
CONSTANT_HEADER_BYTES = 4096
_CONSTANT_HEADER = struct.Struct("<8sIIQQ")


@dataclass(frozen=True)
class ConstantFile:
    """One saved weight: what its header says (None fields: see header_error)."""

    path: str
    key: str  # the weight's key as the daemon named it ("h:<sha256>", a fold, a packing)
    size: int
    mtime: float
    header_error: str | None = None
    payload_size: int | None = None


def list_constants(cache_dir: str) -> list[ConstantFile]:
    """Every saved weight, headers read, unordered."""
    _check_dir(cache_dir)
    root = os.path.join(cache_dir, CONSTANT_DIR)
    out = []
    try:
        shards = [os.path.join(root, s) for s in os.listdir(root) if len(s) == 2]
    except OSError:
        return out
    for shard in shards:
        try:
            names = os.listdir(shard)
        except OSError:
            continue
        for name in names:
            path = os.path.join(shard, name)
            if not name.endswith(CONSTANT_SUFFIX) or not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    head = f.read(CONSTANT_HEADER_BYTES)
            except OSError as e:
                out.append(ConstantFile(path, "", 0, 0.0, header_error=f"unreadable: {e.strerror}"))
                continue
            out.append(_parse_constant_header(path, head, st.st_size, st.st_mtime))
    return out


def _parse_constant_header(path: str, head: bytes, size: int, mtime: float) -> ConstantFile:
    if len(head) < CONSTANT_HEADER_BYTES:
        return ConstantFile(path, "", size, mtime, header_error="truncated header")
    magic, fmt, key_length, payload_size, _zero = _CONSTANT_HEADER.unpack_from(head)
    if magic != CONSTANT_MAGIC:
        return ConstantFile(path, "", size, mtime, header_error="bad magic")
    if fmt != CONSTANT_FORMAT_VERSION:
        return ConstantFile(path, "", size, mtime, header_error="other format version")
    stored = head[_CONSTANT_HEADER.size:_CONSTANT_HEADER.size + min(key_length, 4032)]
    key = stored.decode("utf-8", errors="replace")
    if size - CONSTANT_HEADER_BYTES != payload_size:
        return ConstantFile(path, key, size, mtime, header_error="truncated or oversized payload",
                            payload_size=payload_size)
    return ConstantFile(path, key, size, mtime, payload_size=payload_size)
