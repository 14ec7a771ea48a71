"""Large outputs come back in shared-memory blocks of their own
(client/kiln/output_pool.py), with the real daemon: the values are eager's,
a returned tensor never changes under later calls, a block is reused once
its tensor is freed (and not before), and the RPC path does the same."""
from __future__ import annotations

import gc
import os
import subprocess
import sys

import torch
import torch.nn as nn

from conftest import REPO
from kiln import output_pool


class _Head(nn.Module):
    """A projection to a wide output: [rows, 8192] f32 = rows x 32 KiB."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(64, 8192)

    def forward(self, x):
        return self.proj(x), self.proj(x[:1]) * 2


def _pooled(t: torch.Tensor) -> bool:
    # A pooled output's storage is a numpy array over the block's mapping.
    return not t.untyped_storage().resizable()


def test_large_output_is_returned_in_a_block_and_small_one_copied(daemon_up):
    model = _Head().eval()
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(64, 64)  # output 0: 2 MiB, output 1: 32 KiB
    with torch.no_grad():
        big, small = compiled(x)
        want_big, want_small = model(x)
    torch.testing.assert_close(big, want_big, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(small, want_small, rtol=1e-5, atol=1e-5)
    assert big.nbytes >= output_pool.MIN_BYTES and _pooled(big)
    assert small.nbytes < output_pool.MIN_BYTES and not _pooled(small)
    assert big.is_contiguous() and big.shape == want_big.shape


def test_returned_output_never_changes_and_blocks_are_reused_once_freed(daemon_up):
    model = _Head().eval()
    compiled = torch.compile(model, backend="kiln")
    x1, x2 = torch.randn(64, 64), torch.randn(64, 64)
    with torch.no_grad():
        first, _ = compiled(x1)
        kept = first.clone()
        view = first[3:5]  # a view keeps the block in use after `first` goes
        address = first.data_ptr()
        del first
        gc.collect()
        second, _ = compiled(x2)
        assert second.data_ptr() != address  # the view still holds that block
        torch.testing.assert_close(view, kept[3:5], rtol=0, atol=0)
        torch.testing.assert_close(second, model(x2)[0], rtol=1e-5, atol=1e-5)
        # The caller may write to its output: the next call is not affected.
        second.fill_(7.0)
        del view
        gc.collect()
        third, _ = compiled(x1)
        torch.testing.assert_close(third, kept, rtol=0, atol=0)
        del third
        gc.collect()
        fourth, _ = compiled(x2)
        assert fourth.data_ptr() == address  # freed blocks come back
    assert torch.all(second == 7.0)


def test_pooled_outputs_over_the_execute_rpc(daemon_up):
    # A fresh process: the channel choice is made when the client starts.
    code = (
        "import torch, sys\n"
        "sys.path.insert(0, %r)\n"
        "from test_output_pool import _Head, _pooled\n"
        "m = _Head().eval(); c = torch.compile(m, backend='kiln'); x = torch.randn(64, 64)\n"
        "with torch.no_grad():\n"
        "    for _ in range(3):\n"
        "        a, b = c(x)\n"
        "        torch.testing.assert_close(a, m(x)[0], rtol=1e-5, atol=1e-5)\n"
        "        assert _pooled(a)\n"
        "print('ok')\n" % str(REPO / "tests" / "python"))
    env = dict(os.environ, KILN_CALL_CHANNEL="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
