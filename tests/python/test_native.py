"""The client's C++ weight check (_kiln_native, kiln/native.py)."""
from __future__ import annotations

import os
import struct
import threading

import pytest
import torch

from kiln import native

check = native.weights_unchanged


def test_helper_is_built_and_used():
    # make setup builds and links it; a broken build must not go unnoticed
    # as a silent switch to the slower Python check.
    assert os.environ.get("KILN_NATIVE", "1") != "0"
    import _kiln_native
    assert _kiln_native.torch_version == torch.__version__
    assert check is _kiln_native.weights_unchanged


@pytest.fixture
def weights():
    w = [torch.randn(8, 4), torch.randn(6, 5)[:, 2], torch.nn.Parameter(torch.randn(3))]
    return tuple(w)


def test_unchanged_weights(weights):
    assert check(weights, weights, native.pack_expected(weights)) is True
    # The expected data pointer is Tensor.data_ptr(): storage offset included.
    assert weights[1].storage_offset() == 2
    assert native.pack_expected(weights[1:2]) == struct.pack(
        "=2Q", weights[1]._version, weights[1].data_ptr())


def test_every_kind_of_change_is_seen(weights):
    expected = native.pack_expected(weights)
    assert check((weights[0], weights[1], torch.randn(3)), weights, expected) is False
    with torch.no_grad():
        weights[2].mul_(2)                        # in place: version bumped
    assert check(weights, weights, expected) is False
    expected = native.pack_expected(weights)
    weights[0].data = torch.randn(8, 4)           # storage swapped, same version
    assert check(weights, weights, expected) is False
    expected = native.pack_expected(weights)
    assert check(weights, weights, expected) is True


def test_inference_tensor_is_compared_by_object_and_storage():
    # No version counter: recorded as NO_VERSION, by both checks alike.
    with torch.inference_mode():
        t = torch.randn(4)
    expected = native.pack_expected((t,))
    assert struct.unpack("=2Q", expected) == (native.NO_VERSION, t.data_ptr())
    assert check((t,), (t,), expected) is True
    assert check((t,), (t,), struct.pack("=2Q", 0, t.data_ptr())) is False
    with torch.inference_mode():
        t.data = torch.randn(4)
    assert check((t,), (t,), expected) is False
    assert native.pack_expected((t,)) != expected


def test_bad_arguments_raise(weights):
    expected = native.pack_expected(weights)
    with pytest.raises(ValueError):
        check(weights[:2], weights, expected)
    with pytest.raises(ValueError):
        check(weights, weights, expected[:-8])
    with pytest.raises(TypeError):
        check(list(weights), weights, expected)


@pytest.mark.parametrize("offsets", [(0, 0), (5, 3), (16, 1)])
def test_stream_copy_copies_exactly(offsets):
    dst_off, src_off = offsets
    n = (1 << 20) + 77  # whole 64-byte steps plus a tail
    src = torch.randint(0, 256, (n + 64,), dtype=torch.uint8)
    dst = torch.zeros(n + 64, dtype=torch.uint8)
    native.stream_copy(dst.data_ptr() + dst_off, src.data_ptr() + src_off, n)
    assert torch.equal(dst[dst_off:dst_off + n], src[src_off:src_off + n])
    assert not dst[:dst_off].any() and not dst[dst_off + n:].any()
    with pytest.raises(ValueError):
        native.stream_copy(0, src.data_ptr(), 8)


def test_large_inputs_reach_the_daemon_intact(daemon_up, monkeypatch):
    # 4 MiB and 64 KiB inputs: over and under shm.STREAM_COPY_MIN_BYTES.
    sizes = []
    real = native.stream_copy

    def counted(dst, src, nbytes):
        sizes.append(nbytes)
        real(dst, src, nbytes)

    monkeypatch.setattr(native, "stream_copy", counted)

    def f(a, b):
        return torch.relu(a * 2.0 + 1.0), b - 3.0

    compiled = torch.compile(f, backend="kiln")
    for _ in range(3):  # fresh values each call, one compiled graph
        a, b = torch.randn(1024, 1024), torch.randn(16384)
        got = compiled(a, b)
        torch.testing.assert_close(got[0], f(a, b)[0], rtol=0, atol=1e-6)
        torch.testing.assert_close(got[1], f(a, b)[1], rtol=0, atol=1e-6)
    assert sizes == [4 << 20] * 3  # the large input streamed, the small one not


@pytest.fixture
def counted_channel_calls(monkeypatch):
    """native.channel_call, counting what it answered: "done", "handed back"
    (finished in Python) or "not taken"."""
    real = native.channel_call
    assert real is not None
    # C waits for the reply up to the liveness interval; a long one, so a
    # reply slowed by a loaded host is still "done" in C.
    from kiln import channel as channel_mod
    monkeypatch.setattr(channel_mod, "LIVENESS_CHECK_S", 10.0)
    seen = []

    def counted(*args):
        got = real(*args)
        seen.append("not taken" if got is None else "done" if got[1] is not None
                    else "handed back")
        return got

    monkeypatch.setattr(native, "channel_call", counted)
    return seen


def _conv_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 4, 1), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 16 * 16, 10)).eval()


def test_whole_calls_go_through_channel_call(daemon_up, counted_channel_calls):
    model = _conv_model()
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        for _ in range(3):  # fresh values each call
            x = torch.randn(2, 3, 16, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert counted_channel_calls == ["done"] * 3


def test_inputs_it_cannot_copy_take_the_general_path(daemon_up, counted_channel_calls):
    # A channels-last input is neither refused nor guessed at: the C path
    # declines it before posting, and the general path copies it.
    model = _conv_model()
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        x = torch.randn(2, 3, 16, 16).to(memory_format=torch.channels_last)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert counted_channel_calls[0] == "done"
    assert "not taken" in counted_channel_calls[1:]


def test_a_call_handed_back_is_finished_in_python(gated_kilnd, counted_channel_calls,
                                                  monkeypatch):
    # With no time to wait in C, a call the daemon has not answered yet is
    # handed back; channel.py waits for the reply and the outputs are
    # copied in Python. The daemon holds each run at its test gate until C
    # has returned, so no reply can come before C looks for it.
    from kiln import channel as channel_mod
    monkeypatch.setattr(channel_mod, "LIVENESS_CHECK_S", 0.0)
    d, gate = gated_kilnd
    model = _conv_model()
    compiled = torch.compile(model, backend="kiln",
                             options={"socket": d.socket, "autostart": False})
    counted = native.channel_call

    def released_after(*args):
        got = counted(*args)
        if got is not None:
            gate.release()  # C has looked and returned: the run may go on
        else:  # nothing posted: the general path posts it, and must not hang
            threading.Thread(target=gate.release, daemon=True).start()
        return got

    with torch.no_grad():
        with gate.open():
            compiled(torch.randn(2, 3, 16, 16))  # compiled, and the channel opened
        monkeypatch.setattr(native, "channel_call", released_after)
        del counted_channel_calls[:]
        for _ in range(3):
            x = torch.randn(2, 3, 16, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert counted_channel_calls == ["handed back"] * 3


def test_channel_call_refuses_a_malformed_plan():
    block = torch.zeros(4096, dtype=torch.uint8)
    with pytest.raises(ValueError):
        native.channel_call((), b"\x01" * 12, block.data_ptr(), 1, 1, 0.0, 0.0)
    with pytest.raises(ValueError):  # one input announced, none described
        native.channel_call((), struct.pack("=3Q", 1, 0, 0), block.data_ptr(), 1, 1, 0.0, 0.0)
    with pytest.raises(TypeError):
        native.channel_call([], struct.pack("=3Q", 0, 0, 0), block.data_ptr(), 1, 1, 0.0, 0.0)
    assert not block.any()  # nothing posted
