"""kiln/decompose.py without a daemon: a node the daemon lacks is replaced
by torch._decomp's decomposition only when the daemon runs all of it, and
the result computes what the node did."""
from __future__ import annotations

import torch
import torch.fx as fx

from kiln import decompose, lowering

from unit import unit_graphs


def narrow_then_scale(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.narrow_copy.default(x, 1, 2, 3) * 2.0


def decomposed_targets(fn, x) -> set[str]:
    """The ops of fn's decomposition of its first call, traced with the
    lowering's table."""
    low = unit_graphs.lowered(fn, [x], constants=frozenset())
    node = next(n for n in low.gm.graph.nodes if n.op == "call_function")
    traced = decompose._trace(node, decompose._decomposition(node.target),
                              lowering.decomposition_table())
    return set(unit_graphs.call_targets(traced))


def test_a_node_the_daemon_lacks_becomes_its_decomposition():
    x = torch.randn(3, 8)
    low = unit_graphs.lowered(narrow_then_scale, [x], constants=frozenset())
    assert "aten.narrow_copy.default" in unit_graphs.call_targets(low.gm)
    pieces = decomposed_targets(narrow_then_scale, x)
    caps = {t: frozenset({torch.float32}) for t in pieces | {"aten.mul.Tensor"}}
    assert decompose.decompose_unsupported(low.gm, caps, lowering.decomposition_table()) == 1
    targets = unit_graphs.call_targets(low.gm)
    assert "aten.narrow_copy.default" not in targets
    assert set(targets) <= set(caps)
    torch.testing.assert_close(low.gm(x), narrow_then_scale(x), rtol=0, atol=0)


def test_a_decomposition_needing_eager_leaves_the_node_whole():
    x = torch.randn(3, 8)
    low = unit_graphs.lowered(narrow_then_scale, [x], constants=frozenset())
    pieces = decomposed_targets(narrow_then_scale, x)
    missing = sorted(pieces)[0]
    caps = {t: frozenset({torch.float32}) for t in (pieces - {missing}) | {"aten.mul.Tensor"}}
    before = unit_graphs.call_targets(low.gm)
    assert decompose.decompose_unsupported(low.gm, caps, lowering.decomposition_table()) == 0
    assert unit_graphs.call_targets(low.gm) == before


def test_a_decomposition_is_checked_for_the_nodes_dtypes():
    x = torch.randn(3, 8)
    low = unit_graphs.lowered(narrow_then_scale, [x], constants=frozenset())
    pieces = decomposed_targets(narrow_then_scale, x)
    caps = {t: frozenset({torch.int64}) for t in pieces}
    caps["aten.mul.Tensor"] = frozenset({torch.float32})
    assert decompose.decompose_unsupported(low.gm, caps, lowering.decomposition_table()) == 0


def test_ops_the_user_disabled_are_not_decomposed():
    x = torch.randn(3, 8)
    low = unit_graphs.lowered(narrow_then_scale, [x], constants=frozenset())
    pieces = decomposed_targets(narrow_then_scale, x)
    caps = {t: frozenset({torch.float32}) for t in pieces | {"aten.mul.Tensor"}}
    disabled = lambda target: str(target) == "aten.narrow_copy.default"  # noqa: E731
    assert decompose.decompose_unsupported(low.gm, caps, lowering.decomposition_table(),
                                           disabled) == 0


def test_multi_output_nodes_rewire_their_getitems():
    # unbind_copy returns a list: each getitem takes its piece.
    def pieces_sum(x):
        a, b, c = torch.ops.aten.unbind_copy.int(x, 0)
        return a + b * c

    x = torch.randn(3, 5)
    low = unit_graphs.lowered(pieces_sum, [x], constants=frozenset())
    caps = {t: frozenset({torch.float32}) for t in
            ("aten.select.int", "aten.clone.default", "aten.add.Tensor", "aten.mul.Tensor",
             "aten.unsqueeze.default", "aten.squeeze.dims", "aten.split_with_sizes.default",
             "aten.slice.Tensor", "aten.squeeze.dim", "aten.view.default")}
    replaced = decompose.decompose_unsupported(low.gm, caps, lowering.decomposition_table())
    assert replaced == 1, unit_graphs.call_targets(low.gm)
    assert "aten.unbind_copy.int" not in unit_graphs.call_targets(low.gm)
    torch.testing.assert_close(low.gm(x), pieces_sum(x), rtol=0, atol=0)
