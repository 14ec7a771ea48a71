"""kiln.integrations.torchserve in a real TorchServe (Java frontend, four
Python workers) against the test session's kilnd: the example archive from
deploy/torchserve/ is built with its own script, served over HTTP, and every
answer is compared with the eager model.
"""
from __future__ import annotations

import importlib.util
import io
import json
import shutil
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from kiln.connection import get_connection
from kiln.v1 import kiln_pb2
from torchserve_server import EXAMPLE, TorchServe, make_archive

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="TorchServe needs Java")

WORKERS = 4
# Probabilities from fp32 convolutions whose sums the daemon's kernels
# order differently from eager's.
ATOL = 1e-5
RTOL = 1e-4


def stats() -> kiln_pb2.StatsResponse:
    return get_connection().stub.GetStats(kiln_pb2.StatsRequest(), timeout=10)


def eager_model(archive: Path) -> torch.nn.Module:
    spec = importlib.util.spec_from_file_location("ts_example_model", EXAMPLE / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.SmallNet().eval()
    with zipfile.ZipFile(archive) as z:
        model.load_state_dict(torch.load(io.BytesIO(z.read("weights.pt")), weights_only=True))
    return model


def expected(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.softmax(model(x), dim=1)


@pytest.fixture
def served(daemon_up):
    work = Path(tempfile.mkdtemp(prefix="kts-", dir="/tmp"))
    archive = make_archive(work / "store")
    before = stats()
    server = TorchServe(work, work / "store", "smallnet=smallnet.mar")
    server.start()
    try:
        server.wait_ready("smallnet", WORKERS)
        yield server, eager_model(archive), before
    except BaseException:
        print(server.log_tail())
        raise
    finally:
        server.cleanup()


def test_four_workers_one_compile_answers_equal_eager(served):
    server, model, before = served
    after_load = stats()
    # Each worker compiled in initialize() (the config's warm-up input):
    # the daemon compiled once and served the other three from memory.
    assert after_load.graphs_compiled - before.graphs_compiled == 1
    hits = (after_load.memory_cache_hits - before.memory_cache_hits
            + after_load.disk_cache_hits - before.disk_cache_hits)
    assert hits == WORKERS - 1
    worker_pids = {w["pid"] for w in server.workers("smallnet")}
    assert len(worker_pids) == WORKERS
    assert worker_pids <= {c.pid for c in after_load.clients if c.handles >= 1}

    torch.manual_seed(1)
    inputs = [torch.randn(1, 3, 64, 64) for _ in range(32)]

    def ask(x: torch.Tensor) -> tuple[int, bytes]:
        return server.predict("smallnet", json.dumps(x.tolist()).encode())

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, inputs))
    for x, (status, body) in zip(inputs, answers):
        assert status == 200, body[:500]
        torch.testing.assert_close(torch.tensor(json.loads(body)), expected(model, x),
                                   atol=ATOL, rtol=RTOL)
    done = stats()
    # Requests have the warm-up's shape and kind (not inference tensors):
    # no worker compiled again, not even from the daemon's memory.
    assert done.graphs_compiled == after_load.graphs_compiled
    assert done.memory_cache_hits + done.disk_cache_hits == (
        after_load.memory_cache_hits + after_load.disk_cache_hits)
    assert done.executes - after_load.executes >= len(inputs)

    # A request as a torch.save'd tensor, one as a sample without its batch
    # dimension, one wrapped as {"inputs": ...}.
    x = torch.randn(1, 3, 64, 64)
    buf = io.BytesIO()
    torch.save(x, buf)
    for body, ctype in ((buf.getvalue(), "application/octet-stream"),
                        (json.dumps(x[0].tolist()).encode(), "application/json"),
                        (json.dumps({"inputs": x.tolist()}).encode(), "application/json")):
        status, answer = server.predict("smallnet", body, ctype)
        assert status == 200, answer[:500]
        torch.testing.assert_close(torch.tensor(json.loads(answer)), expected(model, x),
                                   atol=ATOL, rtol=RTOL)


def test_bad_request_gets_an_error_and_workers_keep_serving(served):
    server, model, _ = served
    for body in (b'{"no_inputs": 1}', b"not json", json.dumps([[1.0, 2.0]]).encode()):
        status, answer = server.predict("smallnet", body)
        assert status >= 400, answer[:200]
    x = torch.randn(1, 3, 64, 64)
    status, answer = server.predict("smallnet", json.dumps(x.tolist()).encode())
    assert status == 200, answer[:500]
    torch.testing.assert_close(torch.tensor(json.loads(answer)), expected(model, x),
                               atol=ATOL, rtol=RTOL)
    assert sum(w["status"] == "READY" for w in server.workers("smallnet")) == WORKERS
