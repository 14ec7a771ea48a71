"""`kiln cache ls|stats|verify|prune|clear`: the daemon's on-disk cache,
inspected and trimmed through the files themselves (no daemon needed);
`kiln cache export|import`: a cache archive written or read by kilnd's own
binary (cache/cache_archive.h).

The client's lowering entries (lowered/, kiln/lowering_cache.py) are
counted by stats, listed by `ls --lowerings`, checked by verify, aged out
and capped by prune (--older-than, --max-mb; they have no runtime version)
and removed by clear, each reported apart from the daemon's entries.

Safe beside running daemons: they treat a vanished entry as a miss, and
only temporaries older than an hour are removed, since a younger one may be
a daemon's write in progress (removing it would fail that daemon's rename).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import time
from collections import Counter

from kiln import cache_files, daemon
from kiln.cache_files import ConstantFile, Entry, LoweringEntry


def _fmt_bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def _fmt_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _line(e: Entry) -> str:
    version = e.runtime_version if e.runtime_version is not None else f"? ({e.header_error})"
    return f"{e.key[:16]}  {_fmt_bytes(e.size):>10}  {_fmt_time(e.mtime)}  {version}"


def _current_runtime_version() -> str:
    """The version of the kilnd a client here would start, else the client's."""
    try:
        out = subprocess.run([daemon.find_daemon_binary(), "--version"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.split()
        if len(out) == 2 and out[0] == "kilnd":
            return out[1]
    except (daemon.DaemonError, OSError, subprocess.SubprocessError):
        pass
    return importlib.metadata.version("kiln")


def _ls(ns: argparse.Namespace) -> int:
    if ns.lowerings:
        return _ls_lowerings(ns)
    entries = sorted(cache_files.list_entries(ns.cache_dir), key=lambda e: e.mtime, reverse=True)
    if not entries:
        print(f"no entries in {ns.cache_dir}")
        return 0
    print(f"{'key':16}  {'size':>10}  {'last used':19}  runtime")
    for e in entries:
        print(_line(e))
    return 0


def _ls_lowerings(ns: argparse.Namespace) -> int:
    entries = sorted(cache_files.list_lowerings(ns.cache_dir), key=lambda e: e.mtime,
                     reverse=True)
    if not entries:
        print(f"no lowering entries in {ns.cache_dir}")
        return 0
    print(f"{'key':16}  {'size':>10}  {'last used':19}  torch")
    for e in entries:
        torch_version = e.torch_version if e.torch_version is not None else f"? ({e.header_error})"
        print(f"{e.key[:16]}  {_fmt_bytes(e.size):>10}  {_fmt_time(e.mtime)}  {torch_version}")
    return 0


def _stats(ns: argparse.Namespace) -> int:
    entries = cache_files.list_entries(ns.cache_dir)
    total = sum(e.size for e in entries)
    lines = [f"cache dir:    {ns.cache_dir}",
             f"entries:      {len(entries)} ({_fmt_bytes(total)}, {total} bytes)"]
    if entries:
        lines.append(f"last used:    oldest {_fmt_time(min(e.mtime for e in entries))}, "
                     f"newest {_fmt_time(max(e.mtime for e in entries))}")
        per_version = Counter(e.runtime_version or "unreadable header" for e in entries)
        version_bytes = Counter()
        for e in entries:
            version_bytes[e.runtime_version or "unreadable header"] += e.size
        for version, n in sorted(per_version.items()):
            lines.append(f"  runtime {version}: {n} entries ({_fmt_bytes(version_bytes[version])})")
    lowerings = cache_files.list_lowerings(ns.cache_dir)
    lowering_bytes = sum(e.size for e in lowerings)
    lines.append(f"lowerings:    {len(lowerings)} ({_fmt_bytes(lowering_bytes)}, "
                 f"{lowering_bytes} bytes; the client's lowered graphs, not under the cap)")
    saved = cache_files.list_constants(ns.cache_dir)
    saved_bytes = sum(c.size for c in saved)
    lines.append(f"constants:    {len(saved)} ({_fmt_bytes(saved_bytes)}, {saved_bytes} bytes; "
                 "weights the daemon saved, under the cap)")
    cap_mb, source = cache_files.configured_max_mb()
    if cap_mb is None:
        lines.append(f"size cap:     unknown ({source})")
    else:
        cap = "none" if cap_mb == 0 else f"{cap_mb} MiB"
        lines.append(f"size cap:     {cap} ({source}; a daemon started with --cache-max-mb "
                     "uses its own)")
    stale = cache_files.temporaries(ns.cache_dir, cache_files.STALE_TEMPORARY_S)
    if stale:
        lines.append(f"temporaries:  {len(stale)} left by dead writers (kiln cache prune removes them)")
    print("\n".join(lines))
    return 0


def _verify(ns: argparse.Namespace) -> int:
    entries = cache_files.list_entries(ns.cache_dir)
    bad = 0
    kept = 0
    for e in sorted(entries, key=lambda e: e.key):
        reason = cache_files.check(e)
        if reason is None:
            continue
        bad += 1
        if ns.delete and cache_files.remove(e.path):
            print(f"removed {e.key[:16]}: {reason}")
        else:
            kept += 1
            print(f"bad     {e.key[:16]}: {reason} ({e.path})")
    print(f"{len(entries)} entries checked, {bad} bad"
          + (f", {bad - kept} removed" if ns.delete else ""))
    lowerings = cache_files.list_lowerings(ns.cache_dir)
    bad_lowerings = 0
    for e in sorted(lowerings, key=lambda e: e.key):
        reason = cache_files.check_lowering(e)
        if reason is None:
            continue
        bad_lowerings += 1
        if ns.delete and cache_files.remove(e.path):
            print(f"removed lowering {e.key[:16]}: {reason}")
        else:
            kept += 1
            print(f"bad     lowering {e.key[:16]}: {reason} ({e.path})")
    print(f"{len(lowerings)} lowerings checked, {bad_lowerings} bad")
    saved = cache_files.list_constants(ns.cache_dir)
    bad_constants = 0
    for c in sorted(saved, key=lambda c: c.path):
        if c.header_error is None:
            continue
        bad_constants += 1
        if ns.delete and cache_files.remove(c.path):
            print(f"removed constant {c.path}: {c.header_error}")
        else:
            kept += 1
            print(f"bad     constant {c.path}: {c.header_error}")
    print(f"{len(saved)} constants checked (headers and sizes; the daemon checks their "
          f"contents when it reads them), {bad_constants} bad")
    return 1 if kept else 0


def _prune(ns: argparse.Namespace) -> int:
    if ns.max_mb is None and ns.older_than is None and not ns.other_versions:
        print("kiln cache prune: give --max-mb, --older-than and/or --other-versions",
              file=sys.stderr)
        return 2
    # Oldest first: the order the daemon evicts in. Lowering entries take
    # part in age and size pruning, never in --other-versions.
    entries: list[Entry | LoweringEntry | ConstantFile] = sorted(
        cache_files.list_entries(ns.cache_dir) + cache_files.list_lowerings(ns.cache_dir)
        + cache_files.list_constants(ns.cache_dir),
        key=lambda e: e.mtime)
    current = ns.runtime_version or (_current_runtime_version() if ns.other_versions else None)
    cutoff = None if ns.older_than is None else time.time() - ns.older_than * 86400
    removed = 0
    removed_bytes = 0

    def drop(e: Entry | LoweringEntry | ConstantFile, why: str) -> bool:
        nonlocal removed, removed_bytes
        if not cache_files.remove(e.path):
            return False
        removed += 1
        removed_bytes += e.size
        kind = ("lowering " if isinstance(e, LoweringEntry)
                else "constant " if isinstance(e, ConstantFile) else "")
        print(f"removed {kind}{e.key[:16]}  {_fmt_bytes(e.size):>10}  {_fmt_time(e.mtime)}  "
              f"({why})")
        return True

    remaining = []
    for e in entries:
        if (ns.other_versions and isinstance(e, Entry) and e.runtime_version is not None
                and e.runtime_version != current):
            if drop(e, f"runtime {e.runtime_version}, not {current}"):
                continue
        if cutoff is not None and e.mtime < cutoff:
            if drop(e, f"unused for more than {ns.older_than:g} days"):
                continue
        remaining.append(e)
    if ns.max_mb is not None:
        total = sum(e.size for e in remaining)
        limit = ns.max_mb << 20
        kept = []
        for e in remaining:
            if total > limit and drop(e, f"least recently used, over {ns.max_mb} MiB"):
                total -= e.size
            else:
                kept.append(e)
        remaining = kept
    for path in cache_files.temporaries(ns.cache_dir, cache_files.STALE_TEMPORARY_S):
        if cache_files.remove(path):
            print(f"removed stale temporary {path}")
    left = sum(e.size for e in remaining)
    print(f"removed {removed} entries ({_fmt_bytes(removed_bytes)}); "
          f"{len(remaining)} entries ({_fmt_bytes(left)}) remain")
    return 0


def _clear(ns: argparse.Namespace) -> int:
    removed = 0
    removed_bytes = 0
    for e in cache_files.list_entries(ns.cache_dir):
        if cache_files.remove(e.path):
            removed += 1
            removed_bytes += e.size
    lowerings = 0
    lowering_bytes = 0
    for e in cache_files.list_lowerings(ns.cache_dir):
        if cache_files.remove(e.path):
            lowerings += 1
            lowering_bytes += e.size
    constants = 0
    constant_bytes = 0
    for c in cache_files.list_constants(ns.cache_dir):
        if cache_files.remove(c.path):
            constants += 1
            constant_bytes += c.size
    for path in cache_files.temporaries(ns.cache_dir, cache_files.STALE_TEMPORARY_S):
        cache_files.remove(path)
    print(f"removed {removed} entries ({_fmt_bytes(removed_bytes)}, {removed_bytes} bytes), "
          f"{lowerings} lowerings ({_fmt_bytes(lowering_bytes)}) and {constants} constants "
          f"({_fmt_bytes(constant_bytes)}) from {ns.cache_dir}")
    return 0


def _archive(ns: argparse.Namespace) -> int:
    """export/import: kilnd does both (cache/cache_archive.h), so an archive
    is checked and sealed by the compiler that will use it."""
    command = ["cache-export" if ns.cache_command == "export" else "cache-import",
               "--cache-dir", ns.cache_dir]
    if ns.key_file:
        command += ["--key-file", ns.key_file]
    if ns.cache_command == "export":
        for prefix in ns.key or ():
            command += ["--key", prefix]
        if ns.used_within is not None:
            command += ["--used-within-s", str(max(1, round(ns.used_within * 86400)))]
    else:
        cap_mb, source = cache_files.configured_max_mb()
        if cap_mb is None:
            print(f"kiln cache import: {source}", file=sys.stderr)
            return 2
        command += ["--cache-max-mb", str(cap_mb)]
    try:
        binary = daemon.find_daemon_binary()
    except daemon.DaemonError as e:
        print(f"kiln cache {ns.cache_command}: {e}", file=sys.stderr)
        return 1
    try:
        return subprocess.run([binary, *command, ns.archive]).returncode
    except OSError as e:
        print(f"kiln cache {ns.cache_command}: cannot run {binary}: {e}", file=sys.stderr)
        return 1


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Registers `cache` and its subcommands on the `kiln` parser."""
    cache = sub.add_parser("cache", help="inspect or trim the on-disk compiled-graph cache")
    cache.add_argument("--cache-dir", default=None,
                       help="cache directory (default: $KILN_CACHE_DIR, else "
                            "$XDG_CACHE_HOME/kiln, else ~/.cache/kiln)")
    commands = cache.add_subparsers(dest="cache_command", required=True)
    ls = commands.add_parser("ls", help="one line per entry, most recently used first")
    ls.add_argument("--lowerings", action="store_true",
                    help="list the client's lowering entries (lowered/) instead")
    commands.add_parser("stats", help="entry count, size, ages, runtime versions, size cap")
    verify = commands.add_parser("verify", help="check every entry's header and checksum")
    verify.add_argument("--delete", action="store_true", help="remove the bad entries")
    prune = commands.add_parser("prune", help="remove entries by size, age or runtime version")
    prune.add_argument("--max-mb", type=_non_negative_int, default=None,
                       help="remove least recently used entries until at most N MiB remain")
    prune.add_argument("--older-than", type=_non_negative_float, default=None, metavar="DAYS",
                       help="remove entries not used for more than DAYS days")
    prune.add_argument("--other-versions", action="store_true",
                       help="remove entries written by another runtime version")
    prune.add_argument("--runtime-version", default=None,
                       help="the version to keep with --other-versions (default: what "
                            "`kilnd --version` prints)")
    commands.add_parser("clear", help="remove every entry (and every lowering entry)")
    key_file_help = ("the archive's key: 64 hex digits in a file only its owner may read "
                     "(openssl rand -hex 32 > FILE; chmod 600 FILE); default "
                     "$KILN_REMOTE_CACHE_KEY_FILE, the fleet's key")
    export = commands.add_parser(
        "export", help="write entries, the constants they use and lowering entries to one "
                       "archive, each record sealed under a key file")
    export.add_argument("archive", metavar="FILE", help="the archive to write")
    export.add_argument("--key-file", default=None, help=key_file_help)
    export.add_argument("--key", action="append", metavar="PREFIX",
                        help="only entries whose key starts with PREFIX (as `kiln cache ls` "
                             "shows it; repeatable), with their constants and no lowering entry")
    export.add_argument("--used-within", type=_non_negative_float, default=None, metavar="DAYS",
                        help="only what was used in the last DAYS days")
    import_ = commands.add_parser(
        "import", help="check every record of an archive under its key and add those that "
                       "open to the cache directory")
    import_.add_argument("archive", metavar="FILE", help="the archive to read")
    import_.add_argument("--key-file", default=None, help=key_file_help)


def run(ns: argparse.Namespace) -> int:
    ns.cache_dir = ns.cache_dir or daemon.default_cache_dir()
    handler = {"ls": _ls, "stats": _stats, "verify": _verify, "prune": _prune,
               "clear": _clear, "export": _archive, "import": _archive}[ns.cache_command]
    try:
        return handler(ns)
    except cache_files.CacheDirError as e:
        print(f"kiln cache: {e}", file=sys.stderr)
        return 1
