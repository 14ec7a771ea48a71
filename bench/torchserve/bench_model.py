"""The benchmark's archived model: the torchvision classifier named by
model-config.yaml's `bench: {model: ...}`, read at construction (TorchServe
instantiates the archive's one nn.Module class without arguments). Weights
come from the archive's state dict."""
import os

import torch
import torchvision
import yaml


class BenchModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "model-config.yaml")) as f:
            name = yaml.safe_load(f)["bench"]["model"]
        self.net = getattr(torchvision.models, name)()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
