"""Text generation as users time it: Hugging Face generate() with a
compiled forward.

For each model (Llama and Qwen2 configurations with random weights), cache
(transformers' default dynamic cache, and cache_implementation="static")
and batch size, each backend (eager, Inductor with freezing, OpenVINO's
backend at f32, Kiln) runs in a child process of its own: it compiles
model.forward, generates once untimed (compiling), then generates --runs
times, timing each token as the logits processor sees it. Reported per
backend: time to first token and per-token latency (medians; the first
token includes the prompt's forward), whether the tokens are eager's, and
for Kiln the input bytes per decode step the daemon read copied into the
arena and in place (a KV cache passed back where the previous step left
it, or updated where it lies).

    .venv/bin/python bench/models/generate.py [--models llama,qwen2]
        [--caches dynamic,static] [--batch 1 8] [--prompt 32] [--new-tokens 32]
        [--runs 3] [--results-file bench/models/RESULTS-generate-{isa}.md]

Every figure goes to bench/results/generate-<date>.json; with
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
SEED = 0


def build(name: str):
    import torch
    import transformers as t
    torch.manual_seed(SEED)
    sizes = dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                 num_attention_heads=8, vocab_size=32000, max_position_embeddings=1024)
    if name == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(num_key_value_heads=8, **sizes)).eval()
    if name == "qwen2":
        return t.Qwen2ForCausalLM(t.Qwen2Config(num_key_value_heads=2, **sizes)).eval()
    raise KeyError(f"unknown model {name!r}; valid: llama, qwen2")


class _Clock:
    """A logits processor that only notes when each token's logits came."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def _daemon_inputs() -> tuple[int, int] | None:
    """(input bytes, of them read in place) of the cell's private kilnd."""
    sock = os.environ.get("KILN_SOCKET")
    if not sock:
        return None
    import grpc
    from kiln import daemon
    from kiln.v1 import kiln_pb2, kiln_pb2_grpc
    channel = grpc.insecure_channel(daemon.target_for(sock))
    try:
        s = kiln_pb2_grpc.KilnStub(channel).GetStats(kiln_pb2.StatsRequest(), timeout=10)
    finally:
        channel.close()
    return s.input_bytes, s.input_bytes_in_place


def cell(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import LogitsProcessorList
    import backends
    torch.set_num_threads(spec["threads"])
    backend = backends.make(spec["backend"], spec["threads"])
    model = build(spec["model"])
    ids = torch.randint(3, model.config.vocab_size, (spec["batch"], spec["prompt"]),
                        generator=torch.Generator().manual_seed(SEED + 1))
    n = spec["new_tokens"]
    kwargs: dict[str, Any] = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  attention_mask=torch.ones_like(ids), pad_token_id=0)
    if spec["cache"] == "static":
        kwargs["cache_implementation"] = "static"
    out: dict[str, Any] = {}
    try:
        with torch.no_grad():
            if backend.name != "eager":
                model.forward = backend.prepare(model.forward, (), ())
            start = time.perf_counter()
            model.generate(ids, **kwargs)
            out["first_generate_s"] = time.perf_counter() - start
            ttft, per_token, steps_bytes = [], [], []
            for _ in range(spec["runs"]):
                clock = _Clock()
                before = _daemon_inputs()
                start = time.perf_counter()
                tokens = model.generate(ids, logits_processor=LogitsProcessorList([clock]),
                                        **kwargs)
                after = _daemon_inputs()
                ttft.append((clock.times[0] - start) * 1e3)
                per_token += [(b - a) * 1e3 for a, b in zip(clock.times, clock.times[1:])]
                if before is not None:
                    steps_bytes.append((after[0] - before[0], after[1] - before[1]))
        out.update(status="ok", ttft_ms=statistics.median(ttft),
                   per_token_ms=statistics.median(per_token),
                   tokens=tokens[:, spec["prompt"]:].tolist(), extra=backend.extra())
        if steps_bytes:
            # Per generate: n forwards (the prompt's, then n - 1 decode steps).
            total, in_place = steps_bytes[-1]
            out["input_bytes_per_call"] = {"copied": (total - in_place) / n,
                                           "in_place": in_place / n}
    except Exception as e:  # noqa: BLE001 - a backend that fails is reported, not fatal
        out.update(status="failed", error=f"{type(e).__name__}: {e}"[:500])
    finally:
        backend.close()
    return out


def table(results: dict[str, Any]) -> str:
    lines = ["| model | cache | batch | backend | first token ms | per token ms | "
             "kiln vs it (per token) | tokens | kiln input bytes per call: copied / in place |",
             "|---|---|--:|---|--:|--:|--:|---|---|"]
    for row in results["rows"]:
        kiln = row["cells"].get("kiln", {})
        for b, c in row["cells"].items():
            if c.get("status") != "ok":
                lines.append(f"| {row['model']} | {row['cache']} | {row['batch']} | {b} | "
                             f"failed: {c.get('error', '')[:120]} | | | | |")
                continue
            ratio = (f"{c['per_token_ms'] / kiln['per_token_ms']:.2f}x"
                     if kiln.get("status") == "ok" and b != "kiln" else "")
            same = ("eager's" if c["tokens"] == row["cells"]["eager"].get("tokens")
                    else "DIFFER")
            moved = c.get("input_bytes_per_call")
            moved_text = (f"{moved['copied'] / 1024:.0f} KiB / {moved['in_place'] / 1024:.0f} KiB"
                          if moved else "")
            lines.append(f"| {row['model']} | {row['cache']} | {row['batch']} | {b} | "
                         f"{c['ttft_ms']:.1f} | {c['per_token_ms']:.2f} | {ratio} | {same} | "
                         f"{moved_text} |")
    return "\n".join(lines)


def report(results: dict[str, Any]) -> str:
    s = results["settings"]
    return "\n".join([
        "# Text generation: generate() with a compiled forward",
        "",
        "Written by `bench/models/generate.py`; run it again rather than edit this file. "
        "Median time to the first token (the prompt's forward included) and median time "
        "per later token, over the timed generate() calls; `kiln vs it` is the backend's "
        "per-token time over Kiln's (above 1: Kiln is faster). Each backend runs in a "
        "process of its own.",
        "",
        *host.header_rows(results),
        f"| generation | prompt of {s['prompt']} tokens, {s['new_tokens']} new tokens, greedy; "
        f"{s['runs']} timed generate() calls after one untimed |",
        "",
        table(results),
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="llama,qwen2")
    parser.add_argument("--caches", default="dynamic,static")
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
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
        "command": " ".join([".venv/bin/python", "bench/models/generate.py", *sys.argv[1:]]),
        "environment": host.environment(args.threads),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "settings": {"prompt": args.prompt, "new_tokens": args.new_tokens, "runs": args.runs},
        "rows": []}
    backends = args.backends.split(",")
    if "eager" not in backends:
        backends.insert(0, "eager")  # the tokens every backend is held to
    for model in args.models.split(","):
        for cache in args.caches.split(","):
            for batch in args.batch:
                row = {"model": model, "cache": cache, "batch": batch, "cells": {}}
                for b in backends:
                    spec = {"model": model, "cache": cache, "batch": batch, "backend": b,
                            "threads": args.threads, "prompt": args.prompt,
                            "new_tokens": args.new_tokens, "runs": args.runs}
                    try:
                        row["cells"][b] = host.run_child(__file__, spec, args.timeout)
                    except subprocess.TimeoutExpired:
                        row["cells"][b] = {"status": "failed", "error": "timed out"}
                    c = row["cells"][b]
                    print(f"{model} {cache} b{batch} {b}: " + (
                        f"first token {c['ttft_ms']:.1f} ms, {c['per_token_ms']:.2f} ms/token"
                        if c["status"] == "ok" else c["error"][:200]), file=sys.stderr)
                results["rows"].append(row)
    results["minutes"] = (time.monotonic() - began) / 60
    text = report(results)
    print(text)
    host.write_results("generate", results, text, args.results_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
