"""The usage OpenVINO's backend documents, with backend="kiln", on library
models built from small configs (random weights, nothing downloaded):

- transformers: `model.forward = torch.compile(model.forward, backend=...,
  options={"aot_autograd": True})`, then greedy `model.generate`;
- diffusers: `pipe.unet = torch.compile(pipe.unet, backend=...)`, then a
  denoising step as a pipeline runs it (classifier-free guidance batch,
  text-encoder-shaped conditioning, scheduler step in eager).

Outputs are compared with eager: tokens exactly; UNet outputs within
max |kiln - eager| <= 1e-3 * max |eager| (fp32 kernels summing in another
order than ATen differ by a few ulps per op).
"""
from __future__ import annotations

import pytest
import torch

from kiln import backend

transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

REL_TOL = 1e-3


def _max_rel_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    assert got.shape == want.shape and got.dtype == want.dtype
    return ((got.double() - want.double()).abs().max() / want.abs().max()).item()


def _llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=512, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config).eval()


def test_llama_generate_with_compiled_forward_gives_eager_tokens(daemon_up):
    model = _llama()
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=8, do_sample=False)
        model.forward = torch.compile(model.forward, backend="kiln",
                                      options={"aot_autograd": True})
        got = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert got.shape == (1, 20)
    assert got.tolist() == want.tolist()
    s = backend.stats()
    # Prefill and every decode step ran in the daemon, nothing in eager.
    assert s.graphs >= 2 and s.eager_graphs == 0, s
    assert s.nodes_in_daemon > 0 and s.nodes_in_eager == 0 and s.fallback_partitions == 0, s


def test_llama_generate_with_a_static_cache_gives_eager_tokens(daemon_up, caplog):
    # cache_implementation="static": the cache is preallocated and every step
    # writes its new keys and values into it (index_copy_), which the
    # lowered graph computes in the daemon and copies back into the cache.
    model = _llama()
    ids = torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=8, do_sample=False,
                              cache_implementation="static")
        # fallback="error": the write-backs are not a fallback.
        model.forward = torch.compile(model.forward, backend="kiln",
                                      options={"fallback": "error"})
        with caplog.at_level("INFO", logger="kiln"):
            got = model.generate(ids, max_new_tokens=8, do_sample=False,
                                 cache_implementation="static")
    assert got.tolist() == want.tolist()
    s = backend.stats()
    assert s.graphs >= 2 and s.eager_graphs == 0 and s.fallback_partitions == 0, s
    # Only the write-backs run in eager: one per cache tensor (2 layers,
    # keys and values) per graph.
    write_backs = [r.getMessage() for r in caplog.records
                   if "writes an updated value back into an input" in r.getMessage()]
    assert write_backs and all(r.levelname == "INFO" for r in caplog.records
                               if "run in eager" in r.getMessage()), caplog.text
    assert all("copy_" in m for m in write_backs)


def _unet():
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, block_out_channels=(32, 64),
        layers_per_block=1, cross_attention_dim=32, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), norm_num_groups=32).eval()


def _denoising_step(unet, scheduler, latents, text, timestep, guidance: float = 7.5):
    """One step as StableDiffusionPipeline takes it: unconditional and text
    batches together, guidance, then the scheduler's update."""
    model_input = scheduler.scale_model_input(torch.cat([latents] * 2), timestep)
    noise = unet(model_input, timestep, encoder_hidden_states=text).sample
    uncond, cond = noise.chunk(2)
    noise = uncond + guidance * (cond - uncond)
    return noise, scheduler.step(noise, timestep, latents).prev_sample


def test_unet_denoising_step_matches_eager(daemon_up):
    unet = _unet()
    scheduler = diffusers.DDIMScheduler()
    scheduler.set_timesteps(10)
    timestep = scheduler.timesteps[0]
    g = torch.Generator().manual_seed(2)
    latents = torch.randn(1, 4, 16, 16, generator=g) * scheduler.init_noise_sigma
    # Text-encoder-shaped conditioning: [unconditional; prompt] x 77 tokens.
    text = torch.randn(2, 77, 32, generator=g)
    with torch.no_grad():
        want_noise, want_latents = _denoising_step(unet, scheduler, latents, text, timestep)
        compiled = torch.compile(unet, backend="kiln")
        got_noise, got_latents = _denoising_step(compiled, scheduler, latents, text, timestep)
    assert _max_rel_diff(got_noise, want_noise) <= REL_TOL
    assert _max_rel_diff(got_latents, want_latents) <= REL_TOL
    s = backend.stats()
    assert s.graphs == 1 and s.nodes_in_daemon > 0 and s.nodes_in_eager == 0, s
