"""Backend options: validation and defaults."""
from __future__ import annotations

import pytest

from kiln.options import KilnOptions


def test_unknown_option_is_rejected_listing_valid_keys():
    with pytest.raises(ValueError) as info:
        KilnOptions.from_mapping({"model_cachin": True})
    message = str(info.value)
    assert "model_cachin" in message
    for key in ("model_caching", "socket", "autostart"):
        assert key in message


def test_defaults_and_environment(monkeypatch):
    monkeypatch.setenv("KILN_AUTOSTART", "0")
    monkeypatch.setenv("KILN_SOCKET", "/tmp/x.sock")
    opts = KilnOptions.from_mapping(None)
    assert opts.model_caching is True
    assert opts.autostart is False
    assert opts.socket == "/tmp/x.sock"
    assert KilnOptions.from_mapping({"autostart": True}).autostart is True


def test_option_type_is_checked():
    with pytest.raises(ValueError):
        KilnOptions.from_mapping({"model_caching": "maybe"})
