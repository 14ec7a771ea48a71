"""The aot_autograd option: AOTAutograd in front of the kiln backend.

AOTAutograd traces a Dynamo graph into ATen graphs: one inference graph
when nothing needs grad, else a forward and a backward graph. Each goes
through the same lowering, partitioning and daemon compile as any graph
(backend.compile_graph); ops the daemon lacks (most *_backward ops today)
run in eager between partitions. This is what OpenVINO's backend documents
for training and for `model.forward = torch.compile(model.forward, ...)`.

Weights: in the inference graph the parameters and buffers sit at the
positions they had in the Dynamo graph, so they stay compiled-in constants
(uploaded once, checked for changes). In training graphs they are ordinary
inputs: an optimizer step changes them every iteration, and re-uploading
and recompiling per step would cost far more than passing them.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch.fx as fx

from kiln import lowering

# compile_graph(gm, example_inputs, constant_inputs) -> callable
CompileFn = Callable[[fx.GraphModule, Sequence[Any], "frozenset[int] | None"], Callable[..., Any]]


def compile_with_aot(gm: fx.GraphModule, example_inputs: Sequence[Any],
                     compile_fn: CompileFn,
                     extra_decompositions: Sequence[str] = ()) -> Callable[..., Any]:
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weights = frozenset(i for i, (n, e) in enumerate(zip(placeholders, example_inputs))
                        if lowering.is_param_or_buffer(n, e))

    def compiler(constants: frozenset[int]):
        def compile_one(graph: fx.GraphModule, inputs: Sequence[Any]):
            # Positions carry over only if AOTAutograd kept every input
            # (it drops duplicated ones, shifting the rest).
            known = constants if len(inputs) == len(example_inputs) else frozenset()
            # AOTAutograd calls its compilers with its fake mode active; out
            # of it, so the graph's real tensor constants (a torch.tensor(...)
            # literal, transformers' empty cache tensors) stay real when the
            # graph is copied or uploaded. Lowering enters the inputs' fake
            # mode itself.
            with unset_fake_temporarily():
                compiled = compile_fn(graph, inputs, known)
            # AOTAutograd calls with a list it owns (boxed calling convention).
            return make_boxed_func(compiled)
        return compile_one

    return aot_module_simplified(
        gm, example_inputs,
        fw_compiler=compiler(frozenset()),
        bw_compiler=compiler(frozenset()),
        inference_compiler=compiler(weights),
        decompositions=lowering.decomposition_table(extra_decompositions))
