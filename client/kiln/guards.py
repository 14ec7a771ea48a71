"""Dynamo's dict-tag guards for the frames this backend compiles.

Dynamo re-checks every guard of a frame before each call. With the weights
of a module lifted to graph inputs, that is a guard per parameter, and on a
small model whose run in the daemon evicts the caller's caches it is a
large part of the call (bench/server/dynamo_cold.py measures it). Dynamo's
`use_recursive_dict_tags_for_guards` skips the guards under a module while
the version tags of its attribute dicts are unchanged: a replaced
parameter, a swapped submodule or a changed flag still fail them.

What it skips are the tensor checks on parameters that are the same
objects, which this backend makes per call itself (KilnSubgraph checks each
weight's object, version, storage and shape; CompiledGraph checks
requires_grad under grad mode). So it is set while Dynamo compiles a frame
for Kiln, where Dynamo reads it (when it builds the frame's guards), and
put back when that compile ends: other backends' frames keep the process's
setting. Options `dict_tag_guards=False` leaves Dynamo's setting alone.
"""
from __future__ import annotations

import torch

# The process's own setting while a Kiln frame is being compiled, else None.
_saved: bool | None = None


def use_for_this_frame() -> None:
    """Turns dict-tag guards on until the Dynamo compile in progress ends.

    Changes nothing outside a Dynamo compile, or with a PyTorch that lacks
    the setting or the compile-end callback.
    """
    global _saved
    config = torch._dynamo.config
    handler = getattr(torch._dynamo, "callback_handler", None)
    if (handler is None or not hasattr(config, "use_recursive_dict_tags_for_guards")
            or torch._guards.CompileContext.current_compile_id() is None):
        return
    # Registered again after torch._dynamo.reset(), which drops callbacks.
    if _restore not in handler.end_callbacks:
        handler.register_end_callback(_restore)
    if _saved is None:
        _saved = bool(config.use_recursive_dict_tags_for_guards)
    config.use_recursive_dict_tags_for_guards = True


def _restore(_args: object) -> None:
    global _saved
    if _saved is not None:
        torch._dynamo.config.use_recursive_dict_tags_for_guards = _saved
        _saved = None
