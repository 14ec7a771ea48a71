"""The model zoo of the whole-model benchmark: name -> builder.

A builder takes a batch size and returns a `Workload`: an eval-mode module
with random weights and the example inputs to call it with. Every model
takes positional tensors and returns one tensor, so each backend (including
an ONNX export) sees the same plain signature; the Hugging Face models are
wrapped to get there. Nothing is downloaded: weights come from configs and
the global seed, so every process that builds the same workload gets the
same weights and inputs.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
from torch import nn

SEED = 0


@dataclasses.dataclass
class Workload:
    """A model ready to benchmark: module(*inputs) -> tensor."""
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...]
    description: str


Builder = Callable[[int], Workload]

TORCHVISION_MODELS = (
    "resnet18", "resnet50", "resnext50_32x4d", "alexnet", "vgg16",
    "squeezenet1_1", "mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0",
    "shufflenet_v2_x1_0", "densenet121", "efficientnet_b0", "regnet_y_400mf",
    "convnext_tiny", "vit_b_16", "swin_t",
)


def _torchvision(name: str) -> Builder:
    def build(batch: int) -> Workload:
        import torchvision
        torch.manual_seed(SEED)
        model = getattr(torchvision.models, name)(weights=None).eval()
        # torchvision zero-initialises vit's classifier head: its output
        # would be all zeros and the correctness column vacuous.
        if name == "vit_b_16":
            nn.init.normal_(model.heads.head.weight, std=0.02)
        x = torch.randn(batch, 3, 224, 224)
        return Workload(model, (x,), ("x",), f"torchvision {name}, {batch}x3x224x224")
    return build


class _HiddenStates(nn.Module):
    """BertModel -> last_hidden_state, so the output is one tensor."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _padding_mask(batch: int, seq: int) -> torch.Tensor:
    # Rows of different real lengths (the first row full), so the mask
    # actually changes the result instead of being all ones.
    mask = torch.ones(batch, seq, dtype=torch.long)
    for row in range(1, batch):
        mask[row, seq - (row * seq) // (2 * batch):] = 0
    return mask


def bert(batch: int, seq: int = 128) -> Workload:
    """BERT-base (12 layers, hidden 768) on batch x seq tokens with a padding mask."""
    from transformers import BertConfig, BertModel
    torch.manual_seed(SEED)
    config = BertConfig()  # the defaults are BERT-base
    model = _HiddenStates(BertModel(config, add_pooling_layer=False)).eval()
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    return Workload(model, (ids, _padding_mask(batch, seq)), ("input_ids", "attention_mask"),
                    f"BertModel base config, {batch}x{seq} tokens, padding mask")


def _llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=512, num_attention_heads=8, num_key_value_heads=8,
                       intermediate_size=1376, num_hidden_layers=4, vocab_size=32000,
                       max_position_embeddings=1024, use_cache=True)


class _LlamaPrefill(nn.Module):
    """Prompt processing: input_ids -> logits of every position."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


class _LlamaDecode(nn.Module):
    """One decode step: (next token, past keys and values) -> logits.

    The KV cache is passed as plain tensors (k0, v0, k1, v1, ...) and turned
    into a DynamicCache inside forward, so the step is a pure function of
    its inputs: every call sees the same past (the cache is not grown
    across timed runs) and ONNX export sees only tensors.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, *past: torch.Tensor) -> torch.Tensor:
        from transformers import DynamicCache
        pairs = [(past[i], past[i + 1]) for i in range(0, len(past), 2)]
        cache = DynamicCache(ddp_cache_data=pairs, config=self.model.config)
        past_len = past[0].shape[2]
        position_ids = torch.full_like(input_ids, past_len)
        out = self.model(input_ids=input_ids, past_key_values=cache,
                         position_ids=position_ids, use_cache=True)
        return out.logits


def llama_prefill(batch: int, seq: int = 128) -> Workload:
    """Small Llama (4 layers, hidden 512) processing a seq-token prompt."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(SEED)
    config = _llama_config()
    model = _LlamaPrefill(LlamaForCausalLM(config)).eval()
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    return Workload(model, (ids,), ("input_ids",),
                    f"LlamaForCausalLM 4x512 (vocab 32000), prefill {batch}x{seq}")


def llama_decode(batch: int, past_len: int = 128) -> Workload:
    """The same Llama generating one token after past_len cached ones."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(SEED)
    config = _llama_config()
    model = _LlamaDecode(LlamaForCausalLM(config)).eval()
    ids = torch.randint(0, config.vocab_size, (batch, 1))
    head_dim = config.hidden_size // config.num_attention_heads
    shape = (batch, config.num_key_value_heads, past_len, head_dim)
    past: list[torch.Tensor] = []
    names = ["input_ids"]
    for layer in range(config.num_hidden_layers):
        past += [torch.randn(shape), torch.randn(shape)]
        names += [f"past_key_{layer}", f"past_value_{layer}"]
    return Workload(model, (ids, *past), tuple(names),
                    f"LlamaForCausalLM 4x512, decode 1 token after {past_len}, batch {batch}")


class _UNetStep(nn.Module):
    """One denoising step: (latents, timestep, text states) -> noise prediction."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor,
                encoder_hidden_states: torch.Tensor) -> torch.Tensor:
        return self.model(sample, timestep, encoder_hidden_states, return_dict=False)[0]


def unet(batch: int) -> Workload:
    """A small Stable-Diffusion-shaped UNet: 4x32x32 latents, [B, 77, 768] text states."""
    from diffusers import UNet2DConditionModel
    torch.manual_seed(SEED)
    model = UNet2DConditionModel(
        sample_size=32, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(128, 256, 512),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32)
    model = _UNetStep(model).eval()
    sample = torch.randn(batch, 4, 32, 32)
    timestep = torch.full((batch,), 500, dtype=torch.long)
    text = torch.randn(batch, 77, 768)
    return Workload(model, (sample, timestep, text),
                    ("sample", "timestep", "encoder_hidden_states"),
                    f"UNet2DConditionModel (128,256,512), {batch}x4x32x32, text {batch}x77x768")


MODELS: dict[str, Builder] = {name: _torchvision(name) for name in TORCHVISION_MODELS}
MODELS.update({
    "bert_base": bert,
    "llama_prefill": llama_prefill,
    "llama_decode": llama_decode,
    "unet_small": unet,
})


def build(name: str, batch: int) -> Workload:
    """The workload `name` at batch size `batch` (KeyError names the valid ones)."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    return MODELS[name](batch)
