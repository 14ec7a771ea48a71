"""Inputs a compiled graph updates in place (a static KV cache's
index_copy_), with the real daemon: the caller's tensor holds eager's
values after every call; from its first update on it lives in an output
block (client/kiln/subgraph.py, _adopt_storage), where later calls read and
update it without a copy (the daemon's input_bytes_in_place counts it);
a tensor other views share is left where it is and updated by copying, so
those views see every update; and the Execute RPC does the same."""
from __future__ import annotations


import pytest
import torch

from conftest import REPO, run_without_channels
from kiln import backend

ROWS, WIDTH = 2048, 256  # 2 MiB: large enough for an output block


def update(cache: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    cache.index_copy_(0, pos, rows)
    return (cache * 2.0).sum(dim=1)


def _in_place_bytes(kilnd) -> int:
    return kilnd.stats().input_bytes_in_place


def _steps(n: int):
    g = torch.Generator().manual_seed(3)
    for step in range(n):
        yield torch.tensor([step, 100 + step]), torch.randn(2, WIDTH, generator=g)


def test_an_updated_input_moves_into_a_block_once_and_is_updated_there(daemon_up):
    compiled = torch.compile(update, backend="kiln")
    torch.manual_seed(0)
    cache = torch.randn(ROWS, WIDTH)
    want_cache = cache.clone()
    address = cache.data_ptr()
    with torch.no_grad():
        for step, (pos, rows) in enumerate(_steps(5)):
            before = _in_place_bytes(daemon_up)
            want = update(want_cache, pos, rows)
            got = compiled(cache, pos, rows)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-3)
            assert torch.equal(cache, want_cache), step
            read_in_place = _in_place_bytes(daemon_up) - before
            if step == 0:
                # Copied in, updated, and the caller's tensor moved onto the
                # block holding the update.
                assert read_in_place == 0
                address = cache.data_ptr()
            else:
                assert read_in_place == cache.nbytes, step
                assert cache.data_ptr() == address, step
    s = backend.stats()
    assert s.fallback_partitions == 0 and s.eager_graphs == 0, s


def test_a_tensor_whose_storage_a_view_shares_stays_put_and_the_view_sees_updates(daemon_up):
    compiled = torch.compile(update, backend="kiln")
    torch.manual_seed(0)
    cache = torch.randn(ROWS, WIDTH)
    row = cache[101]  # the caller keeps a view
    want_cache = cache.clone()
    address = cache.data_ptr()
    before = _in_place_bytes(daemon_up)
    with torch.no_grad():
        for pos, rows in _steps(3):
            want = update(want_cache, pos, rows)
            torch.testing.assert_close(compiled(cache, pos, rows), want, rtol=1e-5, atol=1e-3)
            assert torch.equal(cache, want_cache)
            assert torch.equal(row, want_cache[101])
    assert cache.data_ptr() == address
    assert _in_place_bytes(daemon_up) == before


def test_an_updated_input_over_the_execute_rpc(daemon_up):
    code = (
        "import torch, sys\n"
        "sys.path.insert(0, %r)\n"
        "from test_in_place_updates import update, _steps\n"
        "c = torch.compile(update, backend='kiln')\n"
        "torch.manual_seed(0)\n"
        "cache = torch.randn(2048, 256); want = cache.clone()\n"
        "with torch.no_grad():\n"
        "    for pos, rows in _steps(4):\n"
        "        torch.testing.assert_close(c(cache, pos, rows), update(want, pos, rows),\n"
        "                                   rtol=1e-5, atol=1e-3)\n"
        "        assert torch.equal(cache, want)\n"
        "print(cache.nbytes)\n" % str(REPO / "tests" / "python"))
    before = _in_place_bytes(daemon_up)
    stdout = run_without_channels(code)
    # Steps 1 to 3 read it in place.
    assert _in_place_bytes(daemon_up) - before == 3 * int(stdout.strip().splitlines()[-1])


transformers = pytest.importorskip("transformers")


def test_llama_generate_with_a_static_cache_updates_it_in_place(daemon_up):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=512, max_position_embeddings=1024)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(2))

    def generate():
        # 1024 positions x 4 heads x 64: 1 MiB per key and value tensor.
        cache = transformers.StaticCache(config=config, max_cache_len=1024)
        return model.generate(ids, max_new_tokens=8, do_sample=False, past_key_values=cache)

    with torch.no_grad():
        want = generate()
        model.forward = torch.compile(model.forward, backend="kiln",
                                      options={"fallback": "error"})
        before = _in_place_bytes(daemon_up)
        got = generate()
    assert got.tolist() == want.tolist()
    # 2 layers x keys and values, read where they lie on the decode steps
    # after the first update.
    assert _in_place_bytes(daemon_up) - before >= 4 * (1 << 20), _in_place_bytes(daemon_up)
