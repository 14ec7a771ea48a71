"""End-to-end coverage of transformer and diffusion models in the daemon.

Each model is built from a config with random weights (nothing is
downloaded), compiled with backend="kiln" and compared with eager. Every
ATen node must run in the daemon (zero eager nodes), and outputs must match
eager within

    max |kiln - eager| <= 1e-3 * max |eager|

(relative to the output's largest magnitude: fp32 kernels that sum in a
different order than ATen differ by a few ulps per op, which accumulates
over a dozen layers).

Default sizes keep the run short; KILN_FULL_COVERAGE=1 adds BERT-base at
128 tokens for batch 1 and 8 and batch 8 for Llama and the UNet.
"""
from __future__ import annotations

import os

import pytest
import torch

from kiln import backend

transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

FULL = os.environ.get("KILN_FULL_COVERAGE", "") not in ("", "0")
REL_TOL = 1e-3


def _outputs(value):
    """The tensors of a model output (ModelOutput, tuple, cache), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _outputs(v)]
    if hasattr(value, "layers"):  # transformers' DynamicCache
        return [t for layer in value.layers for t in (layer.keys, layer.values)]
    return []


def assert_close_rel(got, want, what: str) -> float:
    """Checks every output within REL_TOL of its max magnitude; returns the
    worst relative difference."""
    got_t, want_t = _outputs(got), _outputs(want)
    assert len(got_t) == len(want_t) and want_t, what
    worst = 0.0
    for i, (g, w) in enumerate(zip(got_t, want_t)):
        assert g.shape == w.shape and g.dtype == w.dtype, (what, i, g.shape, w.shape)
        scale = w.abs().max().item() if w.numel() else 0.0
        diff = (g.double() - w.double()).abs().max().item() if w.numel() else 0.0
        rel = diff / scale if scale > 0 else diff
        assert rel <= REL_TOL, f"{what}: output {i} {tuple(w.shape)} differs by {diff} (max |eager| {scale})"
        worst = max(worst, rel)
    print(what, "max rel diff", worst)
    return worst


def assert_all_in_daemon(what: str) -> None:
    s = backend.stats()
    print(what, s)
    assert s.nodes_in_eager == 0 and s.fallback_partitions == 0 and s.eager_graphs == 0, (what, s)
    assert s.nodes_in_daemon > 0, (what, s)


# ---- BERT ----------------------------------------------------------------------


def _bert():
    torch.manual_seed(0)
    return transformers.BertModel(transformers.BertConfig()).eval()


def _bert_inputs(batch: int, seq: int):
    g = torch.Generator().manual_seed(batch * 1000 + seq)
    ids = torch.randint(0, 30522, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(batch):  # padding: the last (b + 1) * seq / 8 tokens
        mask[b, seq - (b + 1) * seq // 8:] = 0
    return ids, mask


@pytest.mark.parametrize("batch,seq", [(1, 32)] + ([(1, 128), (8, 128)] if FULL else []))
def test_bert_base_runs_in_daemon(daemon_up, batch, seq):
    model = _bert()
    ids, mask = _bert_inputs(batch, seq)
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        got = compiled(input_ids=ids, attention_mask=mask)
        want = model(input_ids=ids, attention_mask=mask)
    assert_all_in_daemon("bert")
    assert_close_rel(got, want, f"bert b{batch} s{seq}")


# ---- Llama ---------------------------------------------------------------------


def _llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=512, intermediate_size=1376, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=4, vocab_size=32000,
        max_position_embeddings=512)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("batch", [1] + ([8] if FULL else []))
def test_llama_prefill_and_decode_run_in_daemon(daemon_up, batch):
    model = _llama()
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(0, 32000, (batch, 32), generator=g)
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        got = compiled(input_ids=ids, use_cache=True)
        want = model(input_ids=ids, use_cache=True)
        assert_close_rel(got.logits, want.logits, "llama prefill logits")
        got_cache, want_cache = got.past_key_values, want.past_key_values
        token = want.logits[:, -1:].argmax(-1)
        for step in range(2):
            got = compiled(input_ids=token, past_key_values=got_cache, use_cache=True)
            want = model(input_ids=token, past_key_values=want_cache, use_cache=True)
            assert_close_rel(got.logits, want.logits, f"llama decode {step} logits")
            assert_close_rel(got.past_key_values, want.past_key_values,
                             f"llama decode {step} cache")
            got_cache, want_cache = got.past_key_values, want.past_key_values
            token = want.logits[:, -1:].argmax(-1)
    assert_all_in_daemon("llama")


# ---- UNet ----------------------------------------------------------------------


def _unet():
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(
        sample_size=32, in_channels=4, out_channels=4, block_out_channels=(32, 64),
        layers_per_block=1, cross_attention_dim=64, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), norm_num_groups=32).eval()


@pytest.mark.parametrize("batch", [1] + ([8] if FULL else []))
def test_unet_step_runs_in_daemon(daemon_up, batch):
    model = _unet()
    g = torch.Generator().manual_seed(batch)
    sample = torch.randn(batch, 4, 32, 32, generator=g)
    timestep = torch.tensor(981)
    text = torch.randn(batch, 77, 64, generator=g)
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        got = compiled(sample, timestep, encoder_hidden_states=text)
        want = model(sample, timestep, encoder_hidden_states=text)
    assert_all_in_daemon("unet")
    assert_close_rel(got.sample, want.sample, f"unet b{batch}")
