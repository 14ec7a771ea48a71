"""Kiln under the global state users' code sets: torch.inference_mode() and
no_grad, weights that are inference tensors, and configuration meant for
other backends (Inductor's freezing, cpp_wrapper, max_autotune; Dynamo's
inline_inbuilt_nn_modules; grad disabled globally; another default dtype).

Each case runs in a fresh Python process against the session's daemon
(user_contexts_child.py), since what it tests is global and, for the first
use, depends on what was imported first.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("user_contexts_child.py")
sys.path.insert(0, str(CHILD.parent))
from user_contexts_child import MODES, SETTINGS  # noqa: E402


def _run(*args: str, timeout_s: float = 600, **env_vars: str) -> list[str]:
    """The child's 'ok ...' lines; fails with its stderr unless it exits 0."""
    env = dict(os.environ, **env_vars)
    env.pop("TORCHINDUCTOR_FREEZING", None)
    out = subprocess.run([sys.executable, str(CHILD), *args], env=env, capture_output=True,
                         text=True, timeout=timeout_s)
    assert out.returncode == 0, out.stderr[-4000:]
    return [line for line in out.stdout.splitlines() if line.startswith("ok ")]


# The client's native helpers test themselves when first imported (in the
# cases below, under the mode or setting tested): where they are built, they
# must pass.
NATIVE = ["ok native"] if importlib.util.find_spec("_kiln_native") is not None else []


def _without_native_line(lines: list[str]) -> list[str]:
    assert ("ok native" in lines) == bool(NATIVE), "the native helpers failed their self-test"
    return [line for line in lines if line != "ok native"]


def test_first_compile_inside_inference_mode_in_a_fresh_process(daemon_up):
    assert _without_native_line(_run("first_use_in_inference_mode")) == ["ok equal"]


@pytest.mark.parametrize("native", ["1", "0"], ids=["native_check", "python_check"])
def test_weights_that_are_inference_tensors_run_and_are_rechecked(daemon_up, native):
    assert _run("inference_tensor_weights", KILN_NATIVE=native) == [
        "ok equal", "ok reloaded", "ok swapped", "ok refused"]


@pytest.mark.parametrize("setting", SETTINGS)
def test_equal_to_eager_under_settings_made_for_other_backends(daemon_up, setting):
    assert _without_native_line(_run("setting", setting)) == [f"ok {mode}" for mode in MODES]


def test_inductor_with_freezing_and_kiln_in_one_process(daemon_up):
    assert _run("inductor_then_kiln") == ["ok both"]
