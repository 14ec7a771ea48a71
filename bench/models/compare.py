"""One model, a few backends: the old entry point, now a thin wrapper of run.py.

Kept so existing commands still work; each backend now runs in its own
process like every run.py cell, and the results land in run.py's --out.

    .venv/bin/python bench/models/compare.py --model resnet18 --batch 1
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import run  # noqa: E402  (needs the path above)


def main() -> int:
    """Translates compare.py's flags to run.py's and runs it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backends", default="eager,kiln,inductor",
                        help=f"comma-separated subset of {','.join(run.ALL_BACKENDS)}")
    parser.add_argument("--out", default=None, help="output directory (run.py's default)")
    args = parser.parse_args()
    argv = ["--models", args.model, "--batch", str(args.batch), "--runs", str(args.runs),
            "--warmup", str(args.warmup), "--backends", args.backends]
    if args.out:
        argv += ["--out", args.out]
    return run.main(argv)


if __name__ == "__main__":
    sys.exit(main())
