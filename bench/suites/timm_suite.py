"""The TIMM suite: PyTorch's CPU benchmark list of timm models
(timm_models.txt), each built by timm with random weights
(`pretrained=False`: nothing is downloaded) at its own input size."""
from __future__ import annotations

import os

import torch

from models import SEED, Workload

HERE = os.path.dirname(os.path.abspath(__file__))


def _listed() -> dict[str, int]:
    """name -> the batch size PyTorch's training harness uses for it."""
    out: dict[str, int] = {}
    with open(os.path.join(HERE, "timm_models.txt")) as f:
        for line in f:
            if line.strip():
                name, batch = line.strip().split(",")
                out[name] = int(batch)
    return out


LISTED = _listed()


def build(name: str, batch: int) -> Workload:
    import timm
    torch.manual_seed(SEED)
    model = timm.create_model(name, pretrained=False).eval()
    channels, height, width = model.pretrained_cfg["input_size"]
    x = torch.randn(batch, channels, height, width)
    return Workload(model, (x,), ("x",),
                    f"timm {name}, {batch}x{channels}x{height}x{width}")
