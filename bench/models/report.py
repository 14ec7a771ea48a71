"""Turns the whole-model benchmark's results.json into tables and a chart.

`markdown()` gives, per batch size, a latency table with Kiln's ratio to
each other backend, a compile-time table and a correctness table, then the
geomean ratios and the list of failed cells. `chart()` draws the speedup
of every backend over eager. `geomean_text()` is what run.py prints last.

A ratio is reference_ms / kiln_ms: above 1 means Kiln is faster. Geomeans
take only models where both backends ran and both passed the correctness
check, and say how many that was.
"""
from __future__ import annotations

import math
from typing import Any

TARGET = "kiln"
BACKEND_ORDER = ("eager", "inductor", "openvino", "onnxruntime", "kiln")


def _backends(results: dict[str, Any]) -> list[str]:
    present = {c["backend"] for c in results["cells"]}
    return [b for b in BACKEND_ORDER if b in present]


def _models(results: dict[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for c in results["cells"]:
        seen.setdefault(c["model"], None)
    return list(seen)


def _batches(results: dict[str, Any]) -> list[int]:
    return sorted({c["batch"] for c in results["cells"]})


def _index(results: dict[str, Any]) -> dict[tuple[str, int, str], dict[str, Any]]:
    return {(c["model"], c["batch"], c["backend"]): c for c in results["cells"]}


def _usable(cell: dict[str, Any] | None) -> bool:
    return bool(cell) and cell["status"] == "ok" and cell.get("correct", False)


def ratio(cells: dict, model: str, batch: int, reference: str) -> float | None:
    """reference_ms / kiln_ms for one model, or None if either is unusable."""
    ref, kiln = cells.get((model, batch, reference)), cells.get((model, batch, TARGET))
    if not (_usable(ref) and _usable(kiln)):
        return None
    return ref["latency_ms"] / kiln["latency_ms"]


def geomeans(results: dict[str, Any]) -> dict[int, dict[str, tuple[float, int]]]:
    """{batch: {reference: (geomean of reference_ms / kiln_ms, number of models)}}."""
    cells = _index(results)
    out: dict[int, dict[str, tuple[float, int]]] = {}
    if TARGET not in _backends(results):
        return out
    for batch in _batches(results):
        out[batch] = {}
        for reference in _backends(results):
            if reference == TARGET:
                continue
            ratios = [r for m in _models(results)
                      if (r := ratio(cells, m, batch, reference)) is not None]
            if ratios:
                out[batch][reference] = (
                    math.exp(sum(math.log(r) for r in ratios) / len(ratios)), len(ratios))
    return out


def geomean_text(results: dict[str, Any]) -> str:
    """The geomean ratios as plain lines, for the terminal."""
    lines = [f"geomean speedup of {TARGET} (reference ms / {TARGET} ms; >1: {TARGET} faster)"]
    for batch, refs in geomeans(results).items():
        for reference, (g, n) in refs.items():
            lines.append(f"  batch {batch:<3} vs {reference:<12} {g:6.2f}x  over {n} models")
    if len(lines) == 1:
        lines.append("  (no model where kiln and a reference both ran correctly)")
    return "\n".join(lines)


def _cell_status(cell: dict[str, Any] | None) -> str | None:
    if cell is None:
        return "-"
    if cell["status"] != "ok":
        return cell["status"]
    return None


def _latency(cell: dict[str, Any] | None) -> str:
    bad = _cell_status(cell)
    if bad:
        return bad
    mark = "" if cell["correct"] else " (wrong)"
    if cell.get("extra", {}).get("ov_fallbacks"):
        mark += " (fallback)"
    return f"{cell['latency_ms']:.2f}{mark}"


def _nodes(cell: dict[str, Any] | None) -> str:
    if not cell or "nodes_in_eager" not in cell.get("extra", {}):
        return "-"
    e = cell["extra"]
    total = e["nodes_in_daemon"] + e["nodes_in_eager"]
    return f"{e['nodes_in_eager']}/{total}" if total else "0/0"


def _row(values: list[str]) -> str:
    return "| " + " | ".join(values) + " |"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + ["--:"] * (len(header) - 1)
    return [_row(header), _row(align)] + [_row(r) for r in rows]


def markdown(results: dict[str, Any]) -> str:
    """The whole report as Markdown."""
    cells = _index(results)
    backends = _backends(results)
    refs = [b for b in backends if b != TARGET] if TARGET in backends else []
    env = results.get("environment", {})
    settings = results.get("settings", {})
    lines = ["# Whole-model benchmark", ""]
    lines.append(
        f"{env.get('cpu', '?')}, {env.get('threads', '?')} threads for every backend; "
        f"median of up to {settings.get('runs', '?')} runs after {settings.get('warmup', '?')} "
        f"warm-up runs (at least {settings.get('min_runs', '?')}, stopping after "
        f"{settings.get('max_seconds', '?')} s); random weights; started "
        f"{results.get('started', '?')}"
        + (f", took {results['total_s'] / 60:.1f} min." if "total_s" in results else "."))
    loads = [x for c in results["cells"] for x in c.get("load", [])]
    if loads:
        lines += ["", f"1-minute load average around the cells: {min(loads):.1f} to "
                  f"{max(loads):.1f} (above the thread count means other work shared the "
                  "cores and latencies are inflated)."]
    if settings.get("dynamo_dict_tags"):
        lines += ["", "Dynamo's use_recursive_dict_tags_for_guards was on (--dynamo-dict-tags; "
                  "off by default in PyTorch) for every backend."]
    versions = env.get("versions", {})
    if versions:
        lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "."]
    for batch in _batches(results):
        models = [m for m in _models(results) if any(
            (m, batch, b) in cells for b in backends)]
        lines += ["", f"## Batch {batch}", "",
                  "Median latency in ms (lower is better); `kiln vs X` = X ms / kiln ms "
                  "(above 1: kiln is faster); `kiln eager nodes` = FX nodes that ran in "
                  "eager PyTorch / all nodes; `(fallback)`: OpenVINO left part of the "
                  "model to PyTorch.", ""]
        header = ["model"] + backends + [f"kiln vs {r}" for r in refs]
        if TARGET in backends:
            header.append("kiln eager nodes")
        rows = []
        for m in models:
            row = [m] + [_latency(cells.get((m, batch, b))) for b in backends]
            for r in refs:
                x = ratio(cells, m, batch, r)
                row.append(f"{x:.2f}x" if x is not None else "-")
            if TARGET in backends:
                row.append(_nodes(cells.get((m, batch, TARGET))))
            rows.append(row)
        g = geomeans(results).get(batch, {})
        if refs:
            rows.append(["**geomean**"] + [""] * len(backends)
                        + [f"**{g[r][0]:.2f}x** (n={g[r][1]})" if r in g else "-" for r in refs]
                        + [""])
        lines += _table(header, rows)

        compiled = [b for b in backends if b != "eager"]
        if compiled:
            lines += ["", "Compile time in s (first call including compilation; "
                      "ONNX Runtime: export + session creation):", ""]
            rows = []
            for m in models:
                row = [m]
                for b in compiled:
                    c = cells.get((m, batch, b))
                    bad = _cell_status(c)
                    row.append(bad or f"{c['compile_s']:.1f}")
                rows.append(row)
            lines += _table(["model"] + compiled, rows)

        lines += ["", "Correctness: max|out - eager| / max|eager| "
                  f"(pass at {settings.get('rel_tolerance', 1e-3):g}):", ""]
        rows = []
        for m in models:
            row = [m]
            for b in backends:
                c = cells.get((m, batch, b))
                bad = _cell_status(c)
                row.append(bad or f"{c['rel_err']:.1e} {'ok' if c['correct'] else 'FAIL'}")
            rows.append(row)
        lines += _table(["model"] + backends, rows)

    failed = [c for c in results["cells"] if c["status"] != "ok"]
    if failed:
        lines += ["", "## Failed cells", ""]
        for c in failed:
            err = c.get("error", "").replace("|", "/").replace("\n", " ")
            lines.append(f"- {c['model']}, batch {c['batch']}, {c['backend']}: "
                         f"{c['status']}: {err[:300]}")
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any], path: str) -> None:
    """A PNG of every backend's speedup over eager, one panel per batch size
    (median latencies instead when eager was not run)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = _index(results)
    with_eager = "eager" in _backends(results)
    backends = [b for b in _backends(results) if b != "eager" or not with_eager]
    batches = _batches(results)
    models = _models(results)
    if not backends or not batches:
        return
    colors = {b: plt.get_cmap("tab10")(i) for i, b in enumerate(BACKEND_ORDER)}
    fig, axes = plt.subplots(len(batches), 1, squeeze=False,
                             figsize=(max(7.5, 0.75 * len(models) + 3.5), 4.2 * len(batches)))
    width = 0.8 / len(backends)
    for ax, batch in zip(axes[:, 0], batches):
        for k, b in enumerate(backends):
            xs, ys = [], []
            for i, m in enumerate(models):
                eager, cell = cells.get((m, batch, "eager")), cells.get((m, batch, b))
                if not _usable(cell) or (with_eager and not _usable(eager)):
                    continue
                xs.append(i + (k - (len(backends) - 1) / 2) * width)
                ys.append(eager["latency_ms"] / cell["latency_ms"] if with_eager
                          else cell["latency_ms"])
            ax.bar(xs, ys, width, label=b, color=colors[b])
        if with_eager:
            ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel("speedup over eager (log)" if with_eager else "median ms (log)")
        ax.set_title(f"batch {batch}, {results.get('environment', {}).get('threads', '?')} "
                     "threads (missing bar: failed or wrong)")
        ax.grid(axis="y", which="both", alpha=0.3)
        # Outside the axes, so it never hides a bar.
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
