"""PT2E int8 models as users quantize them: torchao's prepare_pt2e and
convert_pt2e with X86InductorQuantizer (static, per-channel weights),
exported with strict=True, calibrated on the model's own example input.

For each model of bench/models (random weights), each backend runs the same
quantized graph in a child process of its own: eager, Inductor with
freezing (its int8 lowering), OpenVINO's backend (at f32 hint: the graph's
quantize/dequantize ops say where int8 is), Kiln; and Kiln also runs the
float model, the figure int8 has to beat. Reported: median ms per call,
each backend's time over Kiln's, and the largest difference from the
eager quantized model relative to its largest output.

    .venv/bin/python bench/models/quantized.py [--models resnet50,mobilenet_v3_large]
        [--backends eager,inductor,openvino,kiln] [--runs 20]
        [--results-file bench/models/RESULTS-quantized-{isa}.md]

Every figure goes to bench/results/quantized-<date>.json; with
--results-file the table is written with the host's CPU, flags and FMA peak.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import host  # noqa: E402

BACKENDS = ("eager", "inductor", "openvino", "kiln")


def quantize(model, inputs):
    """The model as convert_pt2e leaves it, calibrated on `inputs`."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    exported = torch.export.export(model, inputs, strict=True).module()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported, quantizer)
    prepared(*inputs)
    return convert_pt2e(prepared)


def _first(out):
    return out if hasattr(out, "shape") else out[0]


def cell(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    import backends
    from models import build
    torch.set_num_threads(spec["threads"])
    work = build(spec["model"], 1)
    backend = backends.make(spec["backend"].removesuffix("-fp32"), spec["threads"])
    out: dict[str, Any] = {}
    try:
        with torch.no_grad():
            model = work.model
            graph = quantize(model, work.inputs)
            ref = _first(graph(*work.inputs)).float()
            if not spec["backend"].endswith("-fp32"):
                model = graph
            run = backend.prepare(model, work.inputs, work.input_names)
            start = time.perf_counter()
            got = _first(run(*work.inputs)).float()
            out["first_call_s"] = time.perf_counter() - start
            for _ in range(2):
                run(*work.inputs)
            times = []
            for _ in range(spec["runs"]):
                start = time.perf_counter()
                run(*work.inputs)
                times.append((time.perf_counter() - start) * 1e3)
        out.update(status="ok", ms=statistics.median(times), ref_max=float(ref.abs().max()),
                   rel_diff=float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-12)),
                   extra=backend.extra())
    except Exception as e:  # noqa: BLE001 - a backend that fails is reported, not fatal
        out.update(status="failed", error=f"{type(e).__name__}: {e}"[:500])
    finally:
        backend.close()
    return out


def _where(c: dict[str, Any]) -> str:
    """What the backend left to eager PyTorch, from its extra facts."""
    extra = c.get("extra") or {}
    if extra.get("ov_fallbacks"):
        first = (extra.get("ov_fallback_messages") or [""])[0]
        failed = [line.strip("- ").split(" with")[0] for line in first.splitlines()
                  if line.startswith("-- ")]
        return ("fell back to eager: OpenVINO did not convert " + ", ".join(failed[:3])
                if failed else "fell back to eager")
    if extra.get("nodes_in_eager"):
        return f"{extra['nodes_in_eager']} nodes in eager"
    return ""


def table(results: dict[str, Any]) -> str:
    lines = ["| model | backend | graph | ms | its time over Kiln's | largest difference "
             "from eager int8 (relative) | largest eager int8 output | ran |",
             "|---|---|---|--:|--:|--:|--:|---|"]
    for row in results["rows"]:
        kiln = row["cells"].get("kiln", {})
        for b, c in row["cells"].items():
            graph = "float" if b.endswith("-fp32") else "PT2E int8"
            if c.get("status") != "ok":
                lines.append(f"| {row['model']} | {b} | {graph} | failed: "
                             f"{c.get('error', '')[:160]} | | | | |")
                continue
            ratio = (f"{c['ms'] / kiln['ms']:.2f}x" if kiln.get("status") == "ok" else "")
            lines.append(f"| {row['model']} | {b.removesuffix('-fp32')} | {graph} | "
                         f"{c['ms']:.2f} | {ratio} | {c['rel_diff']:.1e} | "
                         f"{c['ref_max']:.3g} | {_where(c)} |")
    return "\n".join(lines)


def report(results: dict[str, Any]) -> str:
    return "\n".join([
        "# PT2E int8: the same quantized graph through each backend",
        "",
        "Written by `bench/models/quantized.py`; run it again rather than edit this file. "
        "Median milliseconds per call at batch 1 after two warm-up calls; `its time over "
        "Kiln's` is above 1 where Kiln on the int8 graph is faster. The float row is Kiln "
        "on the model before quantization; its difference is from the int8 model, so it "
        "shows what quantization changed. Each backend runs in a process of its own. With "
        "random weights, a model's int8 output can collapse to near constant (its largest "
        "value says so); its differences then say little.",
        "",
        *host.header_rows(results),
        "",
        table(results),
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v3_large,bert_base")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--results-file",
                        help="also write the report here ({isa} becomes avx2 or avx512)")
    parser.add_argument("--_cell", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._cell:
        print(json.dumps(cell(json.loads(args._cell))), flush=True)
        return 0
    began = time.monotonic()
    results: dict[str, Any] = {
        "command": " ".join([".venv/bin/python", "bench/models/quantized.py", *sys.argv[1:]]),
        "environment": host.environment(args.threads),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "rows": []}
    backends = args.backends.split(",")
    if "kiln" in backends:
        backends.append("kiln-fp32")
    for model in args.models.split(","):
        row: dict[str, Any] = {"model": model, "cells": {}}
        for b in backends:
            spec = {"model": model, "backend": b, "threads": args.threads, "runs": args.runs}
            try:
                row["cells"][b] = host.run_child(__file__, spec, args.timeout)
            except subprocess.TimeoutExpired:
                row["cells"][b] = {"status": "failed", "error": "timed out"}
            c = row["cells"][b]
            print(f"{model} {b}: " + (f"{c['ms']:.2f} ms, rel diff {c['rel_diff']:.1e}"
                                      if c["status"] == "ok" else c["error"][:300]),
                  file=sys.stderr)
        results["rows"].append(row)
    results["minutes"] = (time.monotonic() - began) / 60
    text = report(results)
    print(text)
    host.write_results("quantized", results, text, args.results_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
