"""Logging: everything under the `kiln` logger; KILN_LOG; RPCs and channel
calls logged with their latency at debug level (real daemon)."""
from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import re
import subprocess
import sys

import grpc
import pytest
import torch

import kiln
from kiln import connection, logs
from kiln.v1 import kiln_pb2

RPC_LINE = re.compile(r"^(\w+) (\d+\.\d{3}) ms (\w+) \((.*)\)")


def _model(seed: int):
    torch.manual_seed(seed)  # weights no other test uploads
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4)).eval()


def _rpcs(records) -> dict[str, list[re.Match]]:
    """Method -> parsed kiln.rpc lines."""
    found: dict[str, list[re.Match]] = {}
    for r in records:
        if r.name == "kiln.rpc":
            match = RPC_LINE.match(r.getMessage())
            assert match, r.getMessage()
            found.setdefault(match.group(1), []).append(match)
    return found


def test_every_module_logs_under_kiln():
    names = []
    for info in pkgutil.iter_modules(kiln.__path__):
        module = importlib.import_module(f"kiln.{info.name}")
        for value in vars(module).values():
            if isinstance(value, logging.Logger):
                names.append(value.name)
    assert {"kiln.backend", "kiln.connection", "kiln.rpc", "kiln.channel",
            "kiln.subgraph"} <= set(names), names
    assert all(n == "kiln" or n.startswith("kiln.") for n in names), names


def test_debug_logs_each_rpc_and_channel_call(daemon_up, caplog):
    caplog.set_level(logging.DEBUG, logger="kiln")
    model, x = _model(4242), torch.randn(2, 8)
    with torch.no_grad():
        compiled = torch.compile(model, backend="kiln")
        torch.testing.assert_close(compiled(x), model(x))
        compiled(x)
    rpcs = _rpcs(caplog.records)
    # Weights are new to the daemon: it asks for them, they are uploaded,
    # then compiled.
    assert {"QueryConstants", "UploadConstants", "Compile"} <= set(rpcs), sorted(rpcs)
    for method, lines in rpcs.items():
        for line in lines:
            assert float(line.group(2)) >= 0 and line.group(3) == "OK", line.group(0)
    (upload,) = rpcs["UploadConstants"]
    # 2 weights + 2 biases of fp32: (8*16 + 16 + 16*4 + 4) * 4 bytes
    assert "4 constants, 848 B through shared memory" in upload.group(4), upload.group(0)
    asks, compile_ = rpcs["Compile"]
    assert re.search(r"\d+ nodes, 4 weights to upload first", asks.group(4)), asks.group(0)
    assert re.search(r"\d+ nodes, handle \d+, cache_hit=False", compile_.group(4))
    channel = [r.getMessage() for r in caplog.records if r.name == "kiln.channel"]
    if connection.get_connection(daemon_up.socket).channel() is not None:
        assert len(channel) == 2, channel
        assert all(re.search(r"call handle \d+ \d+\.\d{3} ms OK \(1 inputs, 1 outputs, \d+ B",
                             m) for m in channel), channel


def test_debug_logs_failed_rpc_with_its_status(daemon_up, caplog):
    caplog.set_level(logging.DEBUG, logger="kiln")
    conn = connection.get_connection(daemon_up.socket)
    conn.connect()
    with pytest.raises(grpc.RpcError) as info:
        conn.stub.RegisterRegion(kiln_pb2.RegisterRegionRequest(
            session_id=conn.session_id, name="/kiln-no-such-region", byte_size=4096),
            timeout=10)
    (line,) = _rpcs(caplog.records)["RegisterRegion"]
    assert line.group(3) == info.value.code().name != "OK"
    assert "region of 4096 B" in line.group(4)


def test_no_rpc_lines_above_debug(daemon_up, caplog):
    caplog.set_level(logging.INFO, logger="kiln")
    model, x = _model(4243), torch.randn(3, 8)
    with torch.no_grad():
        torch.compile(model, backend="kiln")(x)
    assert not [r for r in caplog.records if r.name in ("kiln.rpc", "kiln.channel")]


def test_configure_from_env_sets_level_and_one_stderr_handler(monkeypatch):
    logger = logging.getLogger("kiln")
    saved_level, saved_handlers = logger.level, list(logger.handlers)
    root_handlers = list(logging.getLogger().handlers)
    try:
        # With no handler anywhere, KILN_LOG alone makes kiln's lines visible.
        for h in root_handlers:
            logging.getLogger().removeHandler(h)
        for h in saved_handlers:
            logger.removeHandler(h)
        assert logs.configure_from_env("info") == logging.INFO
        assert logger.level == logging.INFO
        assert len(logger.handlers) == 1 and logger.handlers[0].stream is sys.stderr
        assert logs.configure_from_env("DEBUG") == logging.DEBUG
        assert logger.level == logging.DEBUG and len(logger.handlers) == 1
        assert logs.configure_from_env("") is None
        assert logs.configure_from_env("loud") is None and logger.level == logging.DEBUG
    finally:
        for h in list(logger.handlers):
            logger.removeHandler(h)
        for h in saved_handlers:
            logger.addHandler(h)
        for h in root_handlers:
            logging.getLogger().addHandler(h)
        logger.setLevel(saved_level)


_SCRIPT = """
import torch
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
with torch.no_grad():
    torch.compile(m, backend="kiln")(torch.randn(2, 8))
"""


@pytest.mark.parametrize("level", ["debug", "info"])
def test_kiln_log_env_in_a_fresh_process(daemon_up, level):
    env = dict(os.environ, KILN_LOG=level)
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rpc_lines = [line for line in done.stderr.splitlines() if " kiln.rpc DEBUG: " in line]
    if level == "debug":
        methods = {line.split(" kiln.rpc DEBUG: ")[1].split()[0] for line in rpc_lines}
        assert {"OpenSession", "GetCapabilities", "Compile"} <= methods, done.stderr[-3000:]
        assert all(re.search(r" \d+\.\d{3} ms OK ", line) for line in rpc_lines), rpc_lines
    else:
        assert not rpc_lines, done.stderr[-3000:]


def test_nodes_left_in_eager_are_logged_with_their_reason(daemon_up, caplog):
    caplog.set_level(logging.INFO, logger="kiln")

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.logcumsumexp(torch.relu(x), 1) + torch.sigmoid(x)

    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.compile(Model(), backend="kiln")(x)
    unsupported = [r for r in caplog.records if "run in eager (unsupported op)" in r.getMessage()]
    assert len(unsupported) == 1 and unsupported[0].levelno == logging.WARNING
    assert "logcumsumexp" in unsupported[0].getMessage()

    # Nodes the user asked to keep in eager: said, but not as a warning.
    caplog.clear()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(Model(), backend="kiln",
                      options={"disabled_ops": ["aten.sigmoid.default"]})(x)
    chosen = [r for r in caplog.records if "run in eager (disabled by option)" in r.getMessage()]
    assert len(chosen) == 1 and chosen[0].levelno == logging.INFO
    assert "sigmoid" in chosen[0].getMessage()
