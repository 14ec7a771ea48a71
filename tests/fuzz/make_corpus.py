"""Writes the fuzzers' seed corpus: graphs the client really sends (small
models lowered by the backend against a private kilnd) and Execute
requests, well-formed and slightly off, for the graphs execute_fuzz.cc
compiles (handle 1: relu of 16 floats, handle 2: add of two 4x4).

Run from the repository with the venv's python after a build:
    .venv/bin/python tests/fuzz/make_corpus.py
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "client"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from kiln import daemon, serialize, shm  # noqa: E402
from kiln.v1 import kiln_pb2  # noqa: E402


def _write(kind: str, message) -> None:
    data = message.SerializeToString()
    out = HERE / "corpus" / kind
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def graphs() -> None:
    """Lowers a few small models through torch.compile(backend="kiln")."""
    seen = []
    real = serialize.serialize

    def recording(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append(result.graph)
        return result

    serialize.serialize = recording
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "kilnd.sock")
        proc = subprocess.Popen([str(REPO / "build" / "server" / "kilnd"), "--socket", sock,
                                 "--no-cache"], stderr=subprocess.DEVNULL)
        try:
            while not daemon.probe(sock, 1.0):
                time.sleep(0.05)
            models = [
                (nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)),
                 torch.randn(2, 8)),
                (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                               nn.MaxPool2d(2), nn.Conv2d(8, 4, 1), nn.AdaptiveAvgPool2d(1),
                               nn.Flatten(), nn.Softmax(-1)), torch.randn(1, 3, 8, 8)),
                (nn.MultiheadAttention(16, 2, batch_first=True), None),
                (nn.Sequential(nn.Embedding(32, 8), nn.Flatten(), nn.Linear(24, 2)),
                 torch.tensor([[1, 5, 7]])),
            ]
            for model, x in models:
                model.eval()
                compiled = torch.compile(model, backend="kiln",
                                         options={"socket": sock, "autostart": False})
                with torch.no_grad():
                    if x is None:
                        q = torch.randn(1, 5, 16)
                        compiled(q, q, q)
                    else:
                        compiled(x)
                torch._dynamo.reset()
        finally:
            proc.terminate()
            proc.wait()
    for g in seen:
        _write("graph_fuzz", g)


def execute_requests() -> None:
    def desc(offset, shape, dtype=torch.float32, byte_size=None):
        d = kiln_pb2.TensorDescriptor(region_id=1, offset=offset,
                                      meta=shm.tensor_meta(dtype, shape))
        n = 1
        for s in shape:
            n *= s
        d.byte_size = byte_size if byte_size is not None else n * 4
        return d

    cases = [
        (1, [desc(0, (16,))], [desc(4096, (16,))]),
        (2, [desc(0, (4, 4)), desc(64, (4, 4))], [desc(128, (4, 4))]),
        (1, [desc(65536 - 32, (16,))], [desc(0, (16,))]),
        (1, [desc(2, (16,))], [desc(0, (16,))]),
        (2, [desc(0, (4, 4))], [desc(128, (4, 4))]),
        (3, [desc(0, (16,))], [desc(64, (16,))]),
        (1, [desc(0, (16,), byte_size=8)], [desc(64, (16,))]),
    ]
    for handle, inputs, outputs in cases:
        _write("execute_fuzz", kiln_pb2.ExecuteRequest(session_id="", handle=handle,
                                                       inputs=inputs, outputs=outputs))


if __name__ == "__main__":
    graphs()
    execute_requests()
    print(f"corpus in {HERE / 'corpus'}")
