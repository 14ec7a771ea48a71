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


def test_config_keys_are_validated_listing_valid_keys_and_values():
    with pytest.raises(ValueError) as info:
        KilnOptions.from_mapping({"config": {"threads": 2}})
    message = str(info.value)
    assert "threads" in message
    for fragment in ("num_threads", "latency, throughput", "f32, bf16"):
        assert fragment in message
    for bad, fragment in (({"num_threads": 0}, "from 1 to 256"),
                          ({"num_threads": 1000}, "from 1 to 256"),
                          ({"num_threads": True}, "from 1 to 256"),
                          ({"num_threads": "two"}, "from 1 to 256"),
                          ({"hint": "fast"}, "latency, throughput"),
                          ({"precision": "fp16"}, "f32, bf16, auto"),
                          ({"branches": "sometimes"}, "off, auto, on")):
        with pytest.raises(ValueError, match=fragment):
            KilnOptions.from_mapping({"config": bad})
    with pytest.raises(ValueError, match="expects a dict"):
        KilnOptions.from_mapping({"config": 3})


def test_config_goes_to_the_compile_request_as_strings():
    opts = KilnOptions.from_mapping(
        {"config": {"num_threads": 1, "hint": "Throughput", "precision": "bf16"}})
    assert opts.config.to_request() == {"num_threads": "1", "hint": "throughput",
                                        "precision": "bf16"}
    # Unset keys are not sent: the daemon's defaults apply.
    assert KilnOptions.from_mapping(None).config.to_request() == {}


def test_config_environment_is_overridden_key_by_key(monkeypatch):
    monkeypatch.setenv("KILN_CONFIG", "num_threads=1, hint=throughput")
    assert KilnOptions.from_mapping(None).config.to_request() == {
        "num_threads": "1", "hint": "throughput"}
    opts = KilnOptions.from_mapping({"config": {"hint": "latency", "precision": "bf16"}})
    assert opts.config.to_request() == {"num_threads": "1", "hint": "latency",
                                        "precision": "bf16"}
    monkeypatch.setenv("KILN_CONFIG", "num_threads")
    with pytest.raises(ValueError, match="key=value"):
        KilnOptions.from_mapping(None)


def test_daemon_idle_min_defaults_to_ten_and_takes_fractions_or_zero(monkeypatch):
    monkeypatch.delenv("KILN_DAEMON_IDLE_MIN", raising=False)
    assert KilnOptions.from_mapping(None).daemon_idle_min == 10.0
    assert KilnOptions.from_mapping({"daemon_idle_min": 0}).daemon_idle_min == 0.0
    assert KilnOptions.from_mapping({"daemon_idle_min": "0.5"}).daemon_idle_min == 0.5
    monkeypatch.setenv("KILN_DAEMON_IDLE_MIN", "2.5")
    assert KilnOptions.from_mapping(None).daemon_idle_min == 2.5
    assert KilnOptions.from_mapping({"daemon_idle_min": 1}).daemon_idle_min == 1.0
    for bad in (-1, "soon", True):
        with pytest.raises(ValueError, match="daemon_idle_min"):
            KilnOptions.from_mapping({"daemon_idle_min": bad})
