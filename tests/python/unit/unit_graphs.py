"""Real graphs for the unit tests: small functions traced as Dynamo would
hand them over, lowered by the client's own lowering.lower, and
capabilities written here in the daemon's GetCapabilities form.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.fx as fx

from kiln import lowering, partition


def linear_relu_scale(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Two weights (w, b) and a scale the tests can keep out of a partition."""
    return torch.relu(torch.nn.functional.linear(x, w, b)) * 2.0


def example_inputs(batch: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(batch, 8, generator=g), torch.randn(4, 8, generator=g),
            torch.randn(4, generator=g)]


def lowered(fn: Callable[..., torch.Tensor] = linear_relu_scale,
            inputs: Sequence[torch.Tensor] | None = None,
            constants: frozenset[int] = frozenset({1, 2})) -> lowering.LoweredGraph:
    """fn traced as Dynamo would hand it over and lowered to functional ATen."""
    inputs = example_inputs() if inputs is None else inputs
    return lowering.lower(fx.symbolic_trace(fn), inputs, constant_inputs=constants)


def call_targets(gm: fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


# Ops the daemon marks "view" (capabilities' traits): a partition of only
# those stays in eager. The tests that partition give none (every partition
# they make holds compute); test_partition.py tests the rule itself.
NO_VIEWS: frozenset[str] = frozenset()


def capabilities(gm: fx.GraphModule, without: Sequence[str] = ()) -> partition.Capabilities:
    """Every ATen op of gm in float32, but those named in `without`."""
    return {t: frozenset({torch.float32}) for t in call_targets(gm) if t not in without}
