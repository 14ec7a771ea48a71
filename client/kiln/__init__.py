"""Kiln: an out-of-process torch.compile backend (client side).

    compiled = torch.compile(model, backend="kiln")   # no import needed
    print(kiln.explain(model, x))                     # what ran where, and why

The backend is registered through the torch_dynamo_backends entry point
(kiln.backend:kiln_backend). `kiln status` shows the daemon's stats;
`python -m kiln.demo` runs resnet18 through it. Logging goes to the `kiln`
logger; KILN_LOG=debug|info configures it (kiln/logs.py).
"""
from kiln import logs as _logs

_logs.configure_from_env()

__all__ = ["explain", "Explanation"]


def __getattr__(name: str):
    # Imported on first use: the CLI (`kiln status`) must not pay for
    # importing torch. The module is not named explain.py: importing it
    # would rebind kiln.explain from the function to the module.
    if name in __all__:
        import importlib
        value = getattr(importlib.import_module("kiln.explanation"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")
