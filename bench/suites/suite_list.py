"""The model lists of bench/suites: one `name,batch size` line per model."""
from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))


def read(file_name: str) -> dict[str, int]:
    """name -> the batch size PyTorch's training harness uses for it."""
    out: dict[str, int] = {}
    with open(os.path.join(HERE, file_name)) as f:
        for line in f:
            if line.strip():
                name, batch = line.strip().split(",")
                out[name] = int(batch)
    return out
