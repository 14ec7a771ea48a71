"""Regenerates the gRPC/protobuf stubs in kiln/v1/ from proto/kiln/v1/kiln.proto.

Usage: python client/generate_proto.py [--out DIR]

The generated files are committed; tests/python/test_generated_stubs.py
regenerates into a temporary directory and checks they are identical.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parent
PROTO_ROOT = CLIENT_DIR.parent / "proto"
PROTO_FILE = "kiln/v1/kiln.proto"


def generate(out_dir: Path, proto_root: Path = PROTO_ROOT) -> None:
    """Runs grpc_tools.protoc, writing kiln/v1/kiln_pb2*.py under out_dir."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        PROTO_FILE,
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}: {' '.join(args)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CLIENT_DIR,
                        help="output root (default: the client directory)")
    ns = parser.parse_args(argv)
    generate(ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
