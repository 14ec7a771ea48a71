"""Kiln: an out-of-process torch.compile backend (client side).

    compiled = torch.compile(model, backend="kiln")   # no import needed

The backend is registered through the torch_dynamo_backends entry point
(kiln.backend:kiln_backend). `kiln status` shows the daemon's stats;
`python -m kiln.demo` runs resnet18 through it. Logging goes to the `kiln`
logger; KILN_LOG=debug|info configures it (kiln/logs.py).
"""
from kiln import logs as _logs

_logs.configure_from_env()
