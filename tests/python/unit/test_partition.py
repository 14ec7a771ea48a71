"""kiln/partition.py without a daemon: what is fused, what stays in eager
and the reason kiln.explain gives for it."""
from __future__ import annotations

import torch
import torch.fx as fx

from kiln import partition
from kiln.options import OpList
from kiln.v1 import kiln_pb2

from unit import unit_graphs


def fused_modules(split: fx.GraphModule) -> list[str]:
    return [n.target for n in split.graph.nodes if n.op == "call_module"]


def eager_calls(split: fx.GraphModule) -> list[fx.Node]:
    return [n for n in split.graph.nodes if n.op == "call_function"]


def test_every_supported_op_goes_into_one_partition():
    lowered = unit_graphs.lowered()
    targets = unit_graphs.call_targets(lowered.gm)
    caps = unit_graphs.capabilities(lowered.gm)
    split = partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS)
    assert fused_modules(split) == ["fused_0"]
    assert eager_calls(split) == []
    assert unit_graphs.call_targets(split.fused_0) == targets


def test_an_op_the_daemon_lacks_stays_in_eager_and_says_why():
    lowered = unit_graphs.lowered()
    caps = unit_graphs.capabilities(lowered.gm, without=["aten.mul.Tensor"])
    split = partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS)
    assert fused_modules(split) == ["fused_0"]
    [mul] = eager_calls(split)
    assert str(mul.target) == "aten.mul.Tensor"
    assert partition.eager_reason(mul, caps) == "unsupported op"


def test_the_partitioned_graph_computes_what_eager_does():
    inputs = unit_graphs.example_inputs()
    lowered = unit_graphs.lowered(inputs=inputs)
    caps = unit_graphs.capabilities(lowered.gm, without=["aten.mul.Tensor"])
    split = partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS)
    torch.testing.assert_close(split(*inputs), unit_graphs.linear_relu_scale(*inputs))


def test_a_node_the_daemon_rejected_is_kept_out_by_name():
    lowered = unit_graphs.lowered()
    caps = unit_graphs.capabilities(lowered.gm)
    relu = next(n.name for n in lowered.gm.graph.nodes if n.target is torch.ops.aten.relu.default)
    split = partition.partition(lowered.gm, caps, excluded={relu}, views=unit_graphs.NO_VIEWS)
    eager = {n.name: n for n in eager_calls(split)}
    assert relu in eager
    assert partition.eager_reason(eager[relu], caps, excluded={relu}) == "rejected by the daemon"
    # Its neighbours on either side are still fused, apart.
    assert sorted(fused_modules(split)) == ["fused_0", "fused_1"]


def test_disabled_ops_stay_in_eager_as_the_users_choice():
    lowered = unit_graphs.lowered()
    caps = unit_graphs.capabilities(lowered.gm)
    disabled = OpList(["aten.relu"]).matches
    split = partition.partition(lowered.gm, caps, disabled=disabled, views=unit_graphs.NO_VIEWS)
    [relu] = [n for n in eager_calls(split) if n.target is torch.ops.aten.relu.default]
    assert partition.eager_reason(relu, caps, disabled=disabled) == "disabled by option"


def test_a_partition_below_the_minimum_size_stays_in_eager():
    lowered = unit_graphs.lowered()
    caps = unit_graphs.capabilities(lowered.gm)
    split = partition.partition(lowered.gm, caps, min_size=10, views=unit_graphs.NO_VIEWS)
    assert fused_modules(split) == []
    relu = next(n for n in eager_calls(split) if n.target is torch.ops.aten.relu.default)
    assert partition.eager_reason(relu, caps) == "partition too small (min_partition_size)"


def test_an_unsupported_dtype_is_named():
    inputs = [t.double() for t in unit_graphs.example_inputs()]
    lowered = unit_graphs.lowered(inputs=inputs)
    caps = unit_graphs.capabilities(lowered.gm)  # float32 only
    split = partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS)
    assert fused_modules(split) == []
    relu = next(n for n in eager_calls(split) if n.target is torch.ops.aten.relu.default)
    assert partition.eager_reason(relu, caps) == "dtype float64 not supported"


def test_view_only_nodes_are_not_compute():
    lowered = unit_graphs.lowered()
    # Capabilities as the daemon sends them: the view trait marks permute.
    response = kiln_pb2.CapabilitiesResponse()
    for target in unit_graphs.call_targets(lowered.gm):
        op = response.ops.add(target=target)
        if target == "aten.permute.default":
            op.traits.append("view")
    views = partition.view_ops_from_proto(response)
    assert views == {"aten.permute.default"}
    kinds = {str(n.target): partition.is_compute_node(n, views)
             for n in lowered.gm.graph.nodes if n.op == "call_function"}
    assert kinds == {"aten.permute.default": False, "aten.addmm.default": True,
                     "aten.relu.default": True, "aten.mul.Tensor": True}


def test_capabilities_keep_the_dtypes_the_client_knows():
    response = kiln_pb2.CapabilitiesResponse()
    op = response.ops.add(target="aten.relu.default")
    op.dtypes.extend([kiln_pb2.FLOAT32, kiln_pb2.INT64, 999])
    assert partition.capabilities_from_proto(response) == {
        "aten.relu.default": frozenset({torch.float32, torch.int64})}


def _transpose_view(x: torch.Tensor) -> torch.Tensor:
    return x.t().unsqueeze(0)


def test_a_partition_of_views_alone_stays_in_eager_unless_the_minimum_is_zero():
    lowered = unit_graphs.lowered(_transpose_view, [torch.randn(3, 4)], frozenset())
    caps = unit_graphs.capabilities(lowered.gm)
    views = frozenset(unit_graphs.call_targets(lowered.gm))
    assert fused_modules(partition.partition(lowered.gm, caps, views=views)) == []
    lowered = unit_graphs.lowered(_transpose_view, [torch.randn(3, 4)], frozenset())
    split = partition.partition(lowered.gm, caps, min_size=0, views=views)
    assert fused_modules(split) == ["fused_0"]
    assert eager_calls(split) == []


def _strided_window(x: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(x, (3, 4), (2, 1), 3)


def _strided_window_of_a_transpose(x: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(x.t(), (3, 2), (1, 3))


def _lowered_split(fn, x):
    lowered = unit_graphs.lowered(fn, [x], frozenset())
    caps = unit_graphs.capabilities(lowered.gm)
    return partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS), caps


def test_as_strided_of_a_dense_input_goes_to_the_daemon():
    split, _ = _lowered_split(_strided_window, torch.randn(12))
    assert fused_modules(split) == ["fused_0"]
    assert eager_calls(split) == []


def test_as_strided_of_a_view_reads_the_views_dense_base():
    # as_strided reads storage, not the view: lowering points it at the
    # transpose's dense input, so it runs in the daemon and the transpose
    # is gone.
    x = torch.randn(2, 3)
    split, _ = _lowered_split(_strided_window_of_a_transpose, x)
    assert fused_modules(split) == ["fused_0"]
    assert "aten.permute.default" not in unit_graphs.call_targets(split.fused_0)
    torch.testing.assert_close(split(x), _strided_window_of_a_transpose(x), rtol=0, atol=0)


def test_as_strided_of_storage_that_is_not_dense_stays_in_eager_with_its_views():
    # The input is a column slice (its storage holds more than its
    # elements): as_strided stays in eager, and so does the transpose it
    # reads, which the daemon would return dense.
    x = torch.randn(4, 6)[:, :3]
    split, caps = _lowered_split(_strided_window_of_a_transpose, x)
    eager = {str(n.target): n for n in eager_calls(split)}
    assert "aten.as_strided.default" in eager and "aten.permute.default" in eager
    assert partition.eager_reason(eager["aten.as_strided.default"], caps) == (
        "reads the storage of an input that is not dense in eager")
    assert partition.eager_reason(eager["aten.permute.default"], caps) == (
        "feeds a view that an op left in eager reads the storage of")
    torch.testing.assert_close(split(x), _strided_window_of_a_transpose(x), rtol=0, atol=0)


def _update_in_place(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x.mul_(2.0)  # the input itself is updated, as a static KV cache is
    return torch.nn.functional.linear(x, w, b)


def test_the_write_back_into_an_updated_input_is_named_as_such():
    inputs = unit_graphs.example_inputs()
    lowered = unit_graphs.lowered(_update_in_place, inputs=[t.clone() for t in inputs])
    caps = unit_graphs.capabilities(lowered.gm, without=["aten.copy_.default"])
    split = partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS)
    [write_back] = [n for n in eager_calls(split) if n.target is torch.ops.aten.copy_.default]
    assert partition.is_write_back(write_back)
    assert partition.eager_reason(write_back, caps) == partition.WRITE_BACK
    # It updates the caller's tensor as eager does.
    got, want = [t.clone() for t in inputs], [t.clone() for t in inputs]
    torch.testing.assert_close(split(*got), _update_in_place(*want))
    torch.testing.assert_close(got[0], want[0])
