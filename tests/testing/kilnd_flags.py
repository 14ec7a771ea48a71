"""kilnd's documented flags, for tests that check the command lines written
in deployment files (Dockerfile, Kubernetes manifests, systemd units)."""
from __future__ import annotations

import re
import subprocess
from functools import lru_cache

from testing.daemons import find_kilnd


@lru_cache(maxsize=1)
def kilnd_binary() -> str:
    return find_kilnd()


@lru_cache(maxsize=1)
def kilnd_flags() -> frozenset[str]:
    """Every flag `kilnd --help` documents."""
    out = subprocess.run([kilnd_binary(), "--help"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    flags = set(re.findall(r"(?:^|[\s,])(--[a-z][a-z0-9-]*)", out))
    assert "--socket" in flags and "--cache-dir" in flags, out
    return frozenset(flags)


def flags_of(args: list[str]) -> dict[str, str | None]:
    """{--flag: value} of a kilnd command line (a flag followed by a flag or
    nothing has no value; --flag=value is split)."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        assert arg.startswith("--"), f"not a flag: {arg!r} in {args}"
        if "=" in arg:
            name, value = arg.split("=", 1)
            out[name] = value
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[arg] = args[i + 1]
            i += 1
        else:
            out[arg] = None
        i += 1
    return out


def assert_known_flags(args: list[str], where: str) -> dict[str, str | None]:
    flags = flags_of(args)
    unknown = set(flags) - kilnd_flags()
    assert not unknown, f"{where}: flags kilnd --help does not document: {sorted(unknown)}"
    return flags
