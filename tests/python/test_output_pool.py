"""Large outputs come back in shared-memory blocks of their own
(client/kiln/output_pool.py), with the real daemon: the values are eager's,
a returned tensor never changes under later calls, a block is reused once
its tensor is freed (and not before), such an output passed back as an
input is read where it lies instead of copied (the daemon's
input_bytes_in_place counts it), and the RPC path does the same."""
from __future__ import annotations

import gc

import torch
import torch.nn as nn

from conftest import REPO, run_without_channels
from kiln import connection, output_pool


class _Head(nn.Module):
    """A projection to a wide output: [rows, 8192] f32 = rows x 32 KiB."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(64, 8192)

    def forward(self, x):
        return self.proj(x), self.proj(x[:1]) * 2


class _Consume(nn.Module):
    """Reads a [rows, 8192] input: one value per row."""

    def forward(self, y):
        return (y * 3.0 - 1.0).sum(dim=1)


def _in_place_bytes(kilnd) -> int:
    return kilnd.stats().input_bytes_in_place


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


def test_an_output_larger_than_the_pool_budget_comes_back_in_the_block_before_last(
        daemon_up, monkeypatch):
    # A budget below one 2 MiB output stands for a prefill's logits of
    # hundreds of MB: `out = compiled(x)` in a loop holds one block while
    # the next call needs another, and the one freed after it is kept.
    monkeypatch.setattr(output_pool, "KEEP_FREE_BYTES", 1 << 20)
    model = _Head().eval()
    compiled = torch.compile(model, backend="kiln")
    xs = [torch.randn(64, 64) for _ in range(4)]
    regions = []  # the daemon's id of each output's block (an address may be reused)
    with torch.no_grad():
        out = None
        for x in xs:
            out, _ = compiled(x)
            torch.testing.assert_close(out, model(x)[0], rtol=1e-5, atol=1e-5)
            pool = connection.get_connection().live_output_pool()
            regions.append(pool._live[out.data_ptr()].region_id)
            gc.collect()
    assert regions[2] == regions[0] and regions[3] == regions[1], regions
    assert regions[0] != regions[1]


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
    stdout = run_without_channels(code)
    assert stdout.strip().endswith("ok")


def test_an_earlier_output_passed_back_is_read_where_it_lies(daemon_up):
    model = _Head().eval()
    produce = torch.compile(model, backend="kiln")
    consume_model = _Consume().eval()
    consume = torch.compile(consume_model, backend="kiln")
    with torch.no_grad():
        big, _ = produce(torch.randn(64, 64))
        assert _pooled(big)
        for what, y in (("the whole output", big),
                        # rows 8 on: 64-byte aligned, contiguous, 1.75 MiB
                        ("an aligned slice of it", big[8:])):
            before = _in_place_bytes(daemon_up)
            got = consume(y)
            assert _in_place_bytes(daemon_up) - before == y.nbytes, what
            torch.testing.assert_close(got, consume_model(y), rtol=1e-5, atol=1e-3)
        # The caller's own writes to it are what the next call reads.
        big.mul_(-0.5)
        got = consume(big)
        torch.testing.assert_close(got, consume_model(big), rtol=1e-5, atol=1e-3)
        # Not dense in its block: copied, as any input.
        before = _in_place_bytes(daemon_up)
        view = big[:, :4096]
        got = consume(view)
        assert _in_place_bytes(daemon_up) == before
        torch.testing.assert_close(got, consume_model(view), rtol=1e-5, atol=1e-3)
        # An ordinary tensor of the same size is copied.
        plain = big.clone()
        got = consume(plain)
        assert _in_place_bytes(daemon_up) == before
        torch.testing.assert_close(got, consume_model(plain), rtol=1e-5, atol=1e-3)


def test_an_output_passed_back_over_the_execute_rpc_is_read_in_place(daemon_up):
    code = (
        "import torch, sys\n"
        "sys.path.insert(0, %r)\n"
        "from test_output_pool import _Head, _Consume, _pooled\n"
        "m, k = _Head().eval(), _Consume().eval()\n"
        "p, c = torch.compile(m, backend='kiln'), torch.compile(k, backend='kiln')\n"
        "with torch.no_grad():\n"
        "    big, _ = p(torch.randn(64, 64))\n"
        "    assert _pooled(big)\n"
        "    for _ in range(3):\n"
        "        torch.testing.assert_close(c(big), k(big), rtol=1e-5, atol=1e-3)\n"
        "print(big.nbytes)\n" % str(REPO / "tests" / "python"))
    before = _in_place_bytes(daemon_up)
    stdout = run_without_channels(code)
    assert _in_place_bytes(daemon_up) - before == 3 * int(stdout.strip().splitlines()[-1])


class _Grow(nn.Module):
    """x [rows, 8192] -> x * 2 + 1: an output as large as the input."""

    def forward(self, x):
        return x * 2.0 + 1.0


def test_an_output_that_grows_a_little_every_call_reuses_blocks(daemon_up, caplog):
    # A dynamic KV cache is one token longer every decode step: the blocks
    # of earlier calls hold it (output_pool.size_class), instead of a new
    # block being made and registered with the daemon on every call.
    compiled = torch.compile(_Grow().eval(), backend="kiln", dynamic=True)
    sizes = range(40, 72)  # 1.25 to 2.25 MiB, 32 KiB more each call
    classes = {output_pool.size_class(rows * 8192 * 4) for rows in sizes}
    kept = []
    with torch.no_grad(), caplog.at_level("DEBUG", logger="kiln.rpc"):
        for rows in sizes:
            x = torch.randn(rows, 8192)
            out = compiled(x)
            torch.testing.assert_close(out, x * 2.0 + 1.0)
            assert _pooled(out)
            assert output_pool.size_class(out.nbytes) - out.nbytes <= out.nbytes // 8 + 4096
            kept = [out]  # the previous call's output is freed, as a cache's is
            gc.collect()
    del kept
    # Registrations of blocks: the arena's sizes are powers of two.
    sizes_registered = [int(m.split("region of ")[1].split(" B")[0])
                        for m in (r.getMessage() for r in caplog.records)
                        if m.startswith("RegisterRegion")]
    blocks = [n for n in sizes_registered if n & (n - 1)]
    # At most two blocks a class: the output kept and the one being written.
    assert len(classes) < len(sizes) // 3
    assert len(blocks) <= 2 * len(classes), sizes_registered
