"""The Hugging Face suite: PyTorch's CPU benchmark list of transformers
models (huggingface_models.txt), built from their configuration classes
with random weights; nothing is downloaded.

A name that is a transformers class is built from that class's default
configuration. A name that stands for a hub checkpoint is built from its
architecture's configuration class with the checkpoint's published sizes
written out below. Sequence lengths follow PyTorch's harness for the same
models; every model is wrapped to take positional token tensors and return
one tensor (its logits), so each backend, ONNX export included, sees the
same plain signature.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

import suite_list
from models import SEED, Workload

LISTED = suite_list.read("huggingface_models.txt")


def _checkpoint(name: str) -> tuple[Any, str]:
    """(config, model class name) of the names that stand for checkpoints."""
    import transformers as t
    if name == "AllenaiLongformerBase":  # allenai/longformer-base-4096
        return t.LongformerConfig(
            vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, attention_window=[512] * 12, max_position_embeddings=4098,
            type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
            sep_token_id=2, layer_norm_eps=1e-5), "LongformerForMaskedLM"
    if name == "T5Small":  # t5-small: T5Config's defaults
        return t.T5Config(), "T5ForConditionalGeneration"
    if name == "DistillGPT2":  # distilgpt2: GPT-2's sizes with 6 layers
        return t.GPT2Config(n_layer=6), "GPT2LMHeadModel"
    if name == "GoogleFnet":  # google/fnet-base: FNetConfig's defaults
        return t.FNetConfig(), "FNetForMaskedLM"
    if name == "YituTechConvBert":  # YituTech/conv-bert-base: ConvBertConfig's defaults
        return t.ConvBertConfig(), "ConvBertForMaskedLM"
    if name == "BigBird":  # google/bigbird-roberta-base: BigBirdConfig's defaults
        return t.BigBirdConfig(), "BigBirdForMaskedLM"
    raise KeyError(name)


def _sequence_length(name: str) -> int:
    if name.startswith("Blenderbot"):
        return 128
    if name.startswith(("GPT2", "Bart", "T5", "PLBart", "MBart")):
        return 1024
    if name in ("AllenaiLongformerBase", "BigBird"):
        return 1024
    if name.startswith("OPT"):
        return 2048
    if name.startswith(("Albert", "Deberta", "Layout", "Electra", "XLNet", "MegatronBert",
                        "Bert", "Roberta")) or name in ("DistillGPT2", "GoogleFnet",
                                                         "YituTechConvBert"):
        return 512
    if name == "TrOCRForCausalLM":
        return 256
    if name.startswith("MobileBert"):
        return 128
    return 128


class _Logits(nn.Module):
    """model(**named inputs) -> its first output (the logits)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        out = self.model(**dict(zip(self.names, inputs)), use_cache=False, return_dict=False)
        return out[0]


def build(name: str, batch: int) -> Workload:
    import transformers as t
    torch.manual_seed(SEED)
    try:
        config, class_name = _checkpoint(name)
    except KeyError:
        class_name = name
        config = getattr(t, class_name).config_class()
    model_class = getattr(t, class_name)
    if class_name.startswith("Roberta"):
        # RoBERTa counts positions from pad_token_id + 1, so 512 tokens need
        # 514 positions, as roberta-base has; the class default has 512.
        config.max_position_embeddings = 514
    if class_name.endswith("ForCausalLM"):
        config.is_decoder = True
    config.use_cache = False
    model = model_class(config).eval()
    seq = _sequence_length(name)
    # Token ids from 3 up: no padding, start or end token by accident.
    ids = torch.randint(3, config.vocab_size, (batch, seq))
    if "Bart" in name and config.eos_token_id is not None:
        ids[:, -1] = config.eos_token_id
    inputs: tuple[torch.Tensor, ...] = (ids,)
    names: tuple[str, ...] = ("input_ids",)
    if config.is_encoder_decoder:
        inputs, names = (ids, ids.clone()), ("input_ids", "decoder_input_ids")
    return Workload(_Logits(model, names).eval(), inputs, names,
                    f"transformers {class_name}, {batch}x{seq} tokens")
