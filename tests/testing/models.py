"""Small models the end-to-end tests compile when the model itself is not
what they test."""
from __future__ import annotations

import torch
import torch.nn as nn


def mlp() -> nn.Module:
    """Linear 16 -> 32, ReLU, Linear 32 -> 4, seeded: takes (batch, 16)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
