"""The committed kiln/v1 stubs match what grpc_tools generates from the proto."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "generate_proto", REPO / "client" / "generate_proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["kiln_pb2.py", "kiln_pb2_grpc.py"])
def test_generated_stubs_are_fresh(tmp_path, name):
    _load_generator().generate(tmp_path)
    fresh = (tmp_path / "kiln" / "v1" / name).read_bytes()
    committed = (REPO / "client" / "kiln" / "v1" / name).read_bytes()
    assert fresh == committed, (
        f"client/kiln/v1/{name} is stale: run `python client/generate_proto.py`")
