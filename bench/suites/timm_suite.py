"""The TIMM suite: PyTorch's CPU benchmark list of timm models
(timm_models.txt), each built by timm with random weights
(`pretrained=False`: nothing is downloaded) at its own input size."""
from __future__ import annotations

import torch

import suite_list
from models import SEED, Workload

LISTED = suite_list.read("timm_models.txt")


def build(name: str, batch: int) -> Workload:
    import timm
    torch.manual_seed(SEED)
    model = timm.create_model(name, pretrained=False).eval()
    channels, height, width = model.pretrained_cfg["input_size"]
    x = torch.randn(batch, channels, height, width)
    return Workload(model, (x,), ("x",),
                    f"timm {name}, {batch}x{channels}x{height}x{width}")
