"""torch.fft through backend="kiln": the transforms (aten._fft_c2c, _fft_r2c,
_fft_c2r) and the complex views and conjugations around them run in the
daemon on complex64 tensors, and give eager's answer (max |kiln - eager| <=
1e-5 * max |eager|: the same float transform up to rounding order).
Complex tensors cross the partition boundary both ways, a conjugate view
from the user included; complex ops the daemon lacks stay in eager."""
from __future__ import annotations

import pytest
import torch

import kiln

REL_TOL = 1e-5


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    assert got.dtype == want.dtype and got.shape == want.shape
    return ((got - want).abs().max() / want.abs().max()).item()


FUNCTIONS = {
    # FNet's mixing: the real part of a 2-D transform over tokens and hidden.
    "fftn_real": lambda x: torch.fft.fftn(x, dim=(1, 2)).real,
    "rfft": lambda x: torch.fft.rfft(x, dim=1),
    "irfft_odd": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=47),
    "ifft": lambda x: torch.fft.ifft(x, norm="forward"),
    "hfft": lambda x: torch.fft.hfft(x, n=30),
    "ihfft": lambda x: torch.fft.ihfft(x),
    "fft2_ortho": lambda x: torch.fft.fft2(x, norm="ortho"),
    "rfftn_irfftn": lambda x: torch.fft.irfftn(torch.fft.rfftn(x), s=x.shape),
    "view_as_complex": lambda x: torch.fft.fft(torch.view_as_complex(x[..., :2].contiguous())),
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_fft_runs_wholly_in_the_daemon_with_eagers_answer(daemon_up, name):
    fn = FUNCTIONS[name]
    torch.manual_seed(0)
    # 48 and 10: radix-4 and radix-2/5 lengths; 3 x 67 below has a prime
    # length past the direct radices.
    x = torch.randn(3, 48, 10)
    want = fn(x)
    report = kiln.explain(fn, x)
    eager = sorted({f"{f.target} ({f.reason})" for f in report.fallbacks})
    assert report.nodes_in_eager == 0, f"{name}: nodes in eager: {eager}"
    assert _rel_err(report.output, want) <= REL_TOL, name


def test_fnet_style_mixing_block_under_inference_mode(daemon_up):
    class Mixing(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(64)
            self.ff = torch.nn.Linear(64, 64)

        def forward(self, x):
            x = self.norm(x + torch.fft.fftn(x, dim=(-2, -1)).real)
            return self.ff(x)

    torch.manual_seed(1)
    with torch.inference_mode():
        model = Mixing().eval()
        x = torch.randn(2, 67, 64)
        want = model(x)
        compiled = torch.compile(model, backend="kiln")
        got = compiled(x)
        got_again = compiled(x + 1)
        want_again = model(x + 1)
    assert _rel_err(got, want) <= REL_TOL
    assert _rel_err(got_again, want_again) <= REL_TOL


def test_complex_inputs_and_a_conjugate_view_cross_into_the_daemon(daemon_up):
    def fn(z):
        return torch.fft.ifft(z, dim=-1)

    torch.manual_seed(2)
    z = torch.randn(4, 36, dtype=torch.complex64)
    compiled = torch.compile(fn, backend="kiln")
    assert _rel_err(compiled(z), fn(z)) <= REL_TOL
    # A lazily conjugated view: its values are the conjugates.
    zc = z.conj()
    assert zc.is_conj()
    assert _rel_err(compiled(zc), fn(zc)) <= REL_TOL


def test_complex_arithmetic_the_daemon_lacks_stays_in_eager(daemon_up):
    def fn(x):
        spectrum = torch.fft.rfft(x)
        return torch.fft.irfft(spectrum * spectrum, n=x.shape[-1])

    torch.manual_seed(3)
    x = torch.randn(2, 32)
    want = fn(x)
    report = kiln.explain(fn, x)
    reasons = {f.target: f.reason for f in report.fallbacks}
    assert set(reasons) == {"aten.mul.Tensor"}, reasons
    assert "complex64" in reasons["aten.mul.Tensor"]
    assert report.nodes_in_daemon >= 2
    assert _rel_err(report.output, want) <= REL_TOL
