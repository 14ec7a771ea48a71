"""One case of test_user_contexts.py, in a process of its own.

    python user_contexts_child.py CASE [SETTING]

Global state is the subject here (grad and inference modes, the default
dtype, Inductor's and Dynamo's configuration, what was imported first), so
every case starts from a fresh interpreter and imports nothing of kiln's
before the user's code would. Each case checks its results itself and
prints one line per check that passed; the test reads them.
"""
from __future__ import annotations

import contextlib
import os
import sys

SETTINGS = ("none", "freezing", "freezing_env", "cpp_wrapper", "max_autotune",
            "inline_inbuilt_nn_modules_true", "inline_inbuilt_nn_modules_false",
            "grad_disabled_globally", "default_dtype_float64")

MODES = ("inference_mode", "no_grad", "grad_enabled")

if len(sys.argv) > 2 and sys.argv[2] == "freezing_env":
    # Read when torch._inductor.config is imported, as deployment guides set it.
    os.environ["TORCHINDUCTOR_FREEZING"] = "1"

import torch  # noqa: E402


class Model(torch.nn.Module):
    """Embedding, linear, layer norm and a buffer: six weight tensors, every
    node supported by the daemon."""

    WEIGHTS = 6

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 16)
        self.linear = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16))

    def forward(self, x):
        return torch.relu(self.norm(self.linear(self.embedding(x)))) * self.scale


def _inputs() -> torch.Tensor:
    return torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(0))


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _mode(name: str):
    return {"inference_mode": torch.inference_mode, "no_grad": torch.no_grad,
            "grad_enabled": lambda: torch.enable_grad()}[name]()


def first_use_in_inference_mode() -> None:
    assert "kiln" not in sys.modules
    torch.manual_seed(0)
    model = Model().eval()
    x = _inputs()
    with torch.inference_mode():
        got = torch.compile(model, backend="kiln")(x)
        want = model(x)
    _close(got, want)
    from kiln import backend, native
    stats = backend.stats()
    assert stats.nodes_in_eager == 0 and stats.nodes_in_daemon > 0, stats
    print("ok equal")
    # The native helpers loaded (their self-test ran inside inference mode).
    if native.weights_unchanged is not None:
        print("ok native")


def inference_tensor_weights() -> None:
    from kiln import backend
    torch.manual_seed(0)
    with torch.inference_mode():
        model = Model().eval()
    assert all(t.is_inference() for t in model.state_dict().values())
    x = _inputs()
    compiled = torch.compile(model, backend="kiln")
    for mode in ("inference_mode", "no_grad"):
        with _mode(mode):
            _close(compiled(x), model(x))
            _close(compiled(x), model(x))
    stats = backend.stats()
    assert stats.nodes_in_eager == 0 and stats.nodes_in_daemon > 0, stats
    print("ok equal")

    # New weights, the way a model built in inference mode gets them: new
    # tensors (load_state_dict(assign=True)), and a storage swapped through
    # .data. Both are seen on the next call.
    with torch.inference_mode():
        model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()},
                              assign=True)
        _close(compiled(x), model(x))
    print("ok reloaded")
    with torch.inference_mode():
        model.linear.weight.data = torch.randn_like(model.linear.weight)
        _close(compiled(x), model(x))
    with torch.no_grad():
        _close(compiled(x), model(x))
    print("ok swapped")

    # What the check relies on: outside inference mode torch refuses to
    # change an inference tensor in place, so no version counter is missed.
    with torch.no_grad():
        try:
            model.linear.weight.add_(1.0)
        except RuntimeError as e:
            assert "inference" in str(e).lower(), e
        else:
            raise AssertionError("an inference tensor was changed in place outside "
                                 "inference mode")
        _close(compiled(x), model(x))
    print("ok refused")


def _apply(setting: str) -> None:
    import torch._inductor.config as inductor_config
    if setting == "freezing":
        inductor_config.freezing = True
    elif setting == "freezing_env":
        assert inductor_config.freezing
    elif setting == "cpp_wrapper":
        inductor_config.cpp_wrapper = True
    elif setting == "max_autotune":
        inductor_config.max_autotune = True
    elif setting.startswith("inline_inbuilt_nn_modules_"):
        torch._dynamo.config.inline_inbuilt_nn_modules = setting.endswith("true")
    elif setting == "grad_disabled_globally":
        torch.set_grad_enabled(False)
    elif setting == "default_dtype_float64":
        torch.set_default_dtype(torch.float64)
    else:
        assert setting == "none", setting


def under_setting(setting: str) -> None:
    """The model under `setting`, called in each mode: equal to eager, every
    node in the daemon, its weights compiled in (not passed per call)."""
    torch.manual_seed(0)
    model = Model().eval()
    _apply(setting)
    # Imported as a user's first compile would: after the setting.
    import kiln
    from kiln import backend, native
    if native.weights_unchanged is not None:
        print("ok native")
    x = _inputs()
    for mode in MODES:
        if mode == "grad_enabled":
            # Weights that need no grad: under grad mode the graph is an
            # inference graph all the same (trainable ones run in eager).
            model.requires_grad_(False)
        torch._dynamo.reset()
        backend.reset_stats()
        with _mode(mode):
            compiled = torch.compile(model, backend="kiln")
            want = model(x)
            _close(compiled(x), want)
            _close(compiled(x), want)
            report = kiln.explain(model, x)
        stats = backend.stats()
        assert stats.nodes_in_eager == 0 and stats.nodes_in_daemon > 0, (mode, stats)
        constants = [g.constants for g in report.graphs]
        held = sum(c.uploaded + c.reused for c in constants)
        assert held == Model.WEIGHTS, (mode, constants)
        print(f"ok {mode}")


def inductor_then_kiln() -> None:
    """Inductor with freezing, then Kiln, in one process: each equal to
    eager, and Inductor's configuration left as the user set it."""
    import torch._inductor.config as inductor_config
    inductor_config.freezing = True
    dict_tags = torch._dynamo.config.use_recursive_dict_tags_for_guards
    torch.manual_seed(0)
    model = Model().eval()
    x = _inputs()
    with torch.no_grad():
        want = model(x)
        by_inductor = torch.compile(model)
        _close(by_inductor(x), want)
        by_kiln = torch.compile(model, backend="kiln")
        _close(by_kiln(x), want)
        _close(by_inductor(x), want)
        _close(by_kiln(x), want)
    from kiln import backend
    stats = backend.stats()
    assert stats.nodes_in_eager == 0 and stats.nodes_in_daemon > 0, stats
    assert inductor_config.freezing is True
    assert torch._dynamo.config.use_recursive_dict_tags_for_guards == dict_tags
    print("ok both")


if __name__ == "__main__":
    case = sys.argv[1]
    if case == "setting":
        under_setting(sys.argv[2])
    else:
        {"first_use_in_inference_mode": first_use_in_inference_mode,
         "inference_tensor_weights": inference_tensor_weights,
         "inductor_then_kiln": inductor_then_kiln}[case]()
