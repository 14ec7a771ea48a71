"""The attributes a get_attr node names by a dotted path ("a.b.c"): reading
one from a module, and placing one on a module built to hold it."""
from __future__ import annotations

from typing import Any

import torch

_ABSENT = object()


def fetch_attr(module: torch.nn.Module, target: str, default: Any = _ABSENT) -> Any:
    """What `target` names on `module`; `default` if given and a part of the
    path is absent (AttributeError otherwise)."""
    value: Any = module
    for part in target.split("."):
        if default is _ABSENT:
            value = getattr(value, part)
        else:
            value = getattr(value, part, _ABSENT)
            if value is _ABSENT:
                return default
    return value


def holder_of(root: torch.nn.Module, target: str) -> tuple[torch.nn.Module, str]:
    """The module of `root` that holds `target` (empty submodules added for
    the missing parts of its path) and the attribute's name on it."""
    *path, leaf = target.split(".")
    holder = root
    for part in path:
        if not hasattr(holder, part):
            holder.add_module(part, torch.nn.Module())
        holder = getattr(holder, part)
    return holder, leaf
