"""Dynamic shapes: symbolic sizes reach the daemon, which specializes.

The client traces, partitions and uploads each Dynamo graph once; a new
input shape costs one Specialize call (the daemon compiles or reuses the
variant), never a new trace, partition or upload. Results are compared
with eager at each shape (tolerance: max abs difference <= 1e-4 relative
to the output's scale; fp32 reassociation differences are ~1e-6).
"""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters
from torch import nn

from kiln import backend
from kiln.connection import get_connection
from kiln.subgraph import KilnSubgraph
from kiln.v1 import kiln_pb2

REL_TOL = 1e-4

transformers = pytest.importorskip("transformers")


def _stats() -> kiln_pb2.StatsResponse:
    return get_connection().stub.GetStats(kiln_pb2.StatsRequest(), timeout=10)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


def _dynamo_graphs(model, backend_name: str, shapes, make_input) -> tuple[int, float]:
    """Runs model over shapes under torch.compile; returns Dynamo's graph
    count and the worst relative difference to eager."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend_name)
    worst = 0.0
    with torch.no_grad():
        for shape in shapes:
            x = make_input(shape)
            got, want = compiled(x), model(x)
            got = getattr(got, "logits", got)
            want = getattr(want, "logits", want)
            assert got.shape == want.shape, shape
            worst = max(worst, _rel(got, want))
    return counters["stats"]["unique_graphs"], worst


def test_llama_over_lengths_and_batches_specializes_in_the_daemon(daemon_up):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
    model = transformers.LlamaForCausalLM(config).eval()
    shapes = [(1, t) for t in range(1, 65)] + [(b, 16) for b in range(2, 9)]
    g = torch.Generator().manual_seed(0)

    def ids(shape):
        return torch.randint(0, config.vocab_size, shape, generator=g)

    reference_graphs, _ = _dynamo_graphs(model, "aot_eager", shapes, ids)
    before = _stats()
    backend.reset_stats()
    kiln_graphs, worst = _dynamo_graphs(model, "kiln", shapes, ids)
    after = _stats()
    s = backend.stats()
    templates = after.dynamic_graphs - before.dynamic_graphs
    variants = after.specializations - before.specializations
    print(f"dynamo graphs: aot_eager {reference_graphs}, kiln {kiln_graphs}; "
          f"client lowerings {s.graphs}; daemon templates {templates}, "
          f"specializations {variants}; worst rel diff {worst:.2e}")
    assert worst <= REL_TOL
    # No more Dynamo compiles than any backend; one lowering per Dynamo graph.
    assert kiln_graphs == reference_graphs
    assert s.graphs == kiln_graphs and s.eager_graphs == 0 and s.fallback_partitions == 0
    # The dynamic graphs became templates (a bounded number), and every new
    # shape one daemon-side specialization, not a client-side recompile.
    assert 1 <= templates <= kiln_graphs
    assert variants <= len(shapes)


def test_mark_dynamic_batch_is_traced_once(daemon_up):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).eval()
    compiled = torch.compile(model, backend="kiln")
    before = _stats()
    with torch.no_grad():
        for batch in (4, 7, 12, 4, 30):
            x = torch.randn(batch, 32)
            torch._dynamo.mark_dynamic(x, 0)
            assert _rel(compiled(x), model(x)) <= REL_TOL
    after = _stats()
    assert backend.stats().graphs == 1
    assert after.dynamic_graphs - before.dynamic_graphs == 1
    assert after.specializations - before.specializations == 4  # 4 distinct batches


def test_variants_past_the_cap_are_released_and_rebuilt(daemon_up, monkeypatch):
    monkeypatch.setattr(KilnSubgraph, "MAX_VARIANTS", 2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).eval()
    compiled = torch.compile(model, backend="kiln", dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(3, 16))  # first compile
        handles = _stats().live_handles
        for batch in (5, 6, 7, 8, 5):
            x = torch.randn(batch, 16)
            assert _rel(compiled(x), model(x)) <= REL_TOL
            assert _stats().live_handles <= handles + 2


def _has_avx512() -> bool:
    with open("/proc/cpuinfo") as f:
        return " avx512f" in f.read()


def test_shape_variants_share_one_copy_of_the_weights(daemon_up):
    """Every variant folds and packs the same weights; the daemon must keep
    one copy of each, not one per sequence length."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=4096, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    compiled = torch.compile(model, backend="kiln")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        # Length 1 compiles a static graph, length 2 the dynamic template
        # and its first variant: from then on only variants.
        for t in (1, 2):
            compiled(torch.randint(0, config.vocab_size, (1, t), generator=g))
        first = _stats()
        before_variants = first.specializations
        for t in range(3, 14):
            x = torch.randint(0, config.vocab_size, (1, t), generator=g)
            assert _rel(compiled(x).logits, model(x).logits) <= REL_TOL
    last = _stats()
    variants = last.specializations - before_variants
    growth = last.resident_bytes - first.resident_bytes
    print(f"weights {weight_bytes / 2**20:.1f} MiB; {variants} more variants grew the daemon "
          f"by {growth / 2**20:.1f} MiB; packed weights {first.packed_weight_bytes / 2**20:.1f} "
          f"-> {last.packed_weight_bytes / 2**20:.1f} MiB")
    assert variants >= 10
    # Without sharing, each variant held its own folded and packed weights
    # (about 1.6x the weight bytes each); eleven variants' own arenas and
    # plans come to less than one copy. Without AVX-512 a weight is packed
    # once per kernel layout, not per variant: lengths up to 8 take the
    # skinny kernel's panels, longer ones oneDNN's plain rows
    # (runtime/kernels/skinny_matmul.h).
    layouts = 1 if _has_avx512() else 2
    assert last.packed_weight_bytes <= layouts * first.packed_weight_bytes  # others may release
    second_layout = max(0, last.packed_weight_bytes - first.packed_weight_bytes)
    assert growth < weight_bytes + second_layout
