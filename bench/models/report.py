"""Turns the whole-model benchmark's results.json into tables and a chart.

`markdown()` gives the run's facts (command, commit, date, host, CPU flags,
measured FMA peak, settings, versions), the geomean ratios, the chart and,
the models where Kiln is behind a reference with the cause profiling found
(bench/causes.txt), per batch size, a latency table with Kiln's ratio to
each other backend, a compile-time table and a correctness table, then the
list of failed cells. `chart()` draws the speedup of every backend over eager (PNG or
SVG, by the file's name). `host_text()` and `geomean_text()` are what
run.py prints first and last.

A ratio is reference_ms / kiln_ms: above 1 means Kiln is faster. Geomeans
take only models where both backends ran and both passed the correctness
check, and say how many that was.
"""
from __future__ import annotations

import math
import os
from typing import Any

TARGET = "kiln"
# Why Kiln is behind a reference on a model, as found by profiling: the
# report names the cause beside each model where Kiln is behind.
CAUSES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "causes.txt")
# "baseline": Kiln of another checkout (run.py --baseline).
BACKEND_ORDER = ("eager", "inductor", "openvino", "onnxruntime", "baseline", "kiln")


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


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(results: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per batch size, over the models eager ran: how many Kiln got right,
    how many ran with no node in eager, and each backend's geomean speedup
    over eager (eager ms / backend ms, over its correct models)."""
    cells = _index(results)
    out: dict[int, dict[str, Any]] = {}
    for batch in _batches(results):
        ran = [m for m in _models(results) if _usable(cells.get((m, batch, "eager")))]
        kiln = [cells.get((m, batch, TARGET)) for m in ran]
        speedups: dict[str, tuple[float, int]] = {}
        for b in _backends(results):
            if b == "eager":
                continue
            ratios = [cells[(m, batch, "eager")]["latency_ms"] / cells[(m, batch, b)]["latency_ms"]
                      for m in ran if _usable(cells.get((m, batch, b)))]
            if ratios:
                speedups[b] = (_geomean(ratios), len(ratios))
        out[batch] = {
            "models": len(ran),
            "kiln_correct": sum(1 for c in kiln if _usable(c)),
            "kiln_no_eager_nodes": sum(1 for c in kiln if _usable(c)
                                       and c.get("extra", {}).get("nodes_in_eager") == 0),
            "speedup_over_eager": speedups,
        }
    return out


def geomean_text(results: dict[str, Any]) -> str:
    """The geomean ratios as plain lines, for the terminal."""
    lines = [f"geomean speedup of {TARGET} (reference ms / {TARGET} ms; >1: {TARGET} faster)"]
    for batch, refs in geomeans(results).items():
        for reference, (g, n) in refs.items():
            lines.append(f"  batch {batch:<3} vs {reference:<12} {g:6.2f}x  over {n} models")
    if len(lines) == 1:
        lines.append("  (no model where kiln and a reference both ran correctly)")
    if TARGET in _backends(results):
        for batch, sm in summary(results).items():
            over = ", ".join(f"{b} {g:.2f}x" for b, (g, _) in sm["speedup_over_eager"].items())
            lines.append(f"  batch {batch:<3} of {sm['models']} models: {TARGET} correct on "
                         f"{sm['kiln_correct']}, no eager node on {sm['kiln_no_eager_nodes']}; "
                         f"over eager: {over}")
    return "\n".join(lines)


def isa_of(env: dict[str, Any]) -> str:
    """The kind of host a run speaks for (host.isa_class)."""
    return "avx512" if "avx512f" in env.get("cpu_flags", []) else "avx2"


def read_causes(path: str = CAUSES) -> dict[tuple[str, str], str]:
    """{(model, host kind): cause} from a causes file: one
    `<model> <avx2|avx512|any>: <cause>` per line, `#` comments."""
    causes: dict[tuple[str, str], str] = {}
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return causes
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, sep, cause = line.partition(":")
        words = head.split()
        if not sep or len(words) != 2 or words[1] not in ("avx2", "avx512", "any") \
                or not cause.strip():
            raise ValueError(f"{path}:{n}: expected '<model> <avx2|avx512|any>: <cause>'")
        causes[(words[0], words[1])] = cause.strip()
    return causes


def behind(results: dict[str, Any]) -> list[tuple[int, str, list[tuple[str, float]]]]:
    """(batch, model, [(reference, reference_ms / kiln_ms)]) for every model
    where a reference that ran correctly was faster than Kiln."""
    cells = _index(results)
    out = []
    for batch in _batches(results):
        for m in _models(results):
            slower = [(r, x) for r in _backends(results) if r != TARGET
                      and (x := ratio(cells, m, batch, r)) is not None and x < 1.0]
            if slower:
                out.append((batch, m, slower))
    return out


def _behind_lines(results: dict[str, Any], causes: dict[tuple[str, str], str]) -> list[str]:
    rows = behind(results)
    if not rows:
        return []
    isa = isa_of(results.get("environment", {}))
    lines = ["", f"## Where {TARGET} is behind", "",
             f"Every model where a backend ran faster than {TARGET} (X ms / {TARGET} ms below 1), "
             "with the cause profiling found (bench/causes.txt; bench/README.md says how):", ""]
    for batch, model, slower in rows:
        refs = ", ".join(f"{r} {x:.2f}x" for r, x in slower)
        cause = causes.get((model, isa)) or causes.get((model, "any")) or "not profiled yet"
        lines.append(f"- {model} (batch {batch}): {refs}. {cause}")
    return lines


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
    if cell.get("sequential"):
        mark += " (seq)"
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


# The CPU features that decide which kernels run (oneDNN's and Kiln's own):
# AVX2+FMA is the baseline, AVX-512 picks other kernels and layouts, the
# bf16/VNNI/AMX ones matter to config={"precision": "bf16"}. run.py records
# those the host has; the report also says which it lacks.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni",
             "amx_tile", "amx_bf16", "amx_int8")


def _flags_text(env: dict[str, Any]) -> str:
    if "cpu_flags" not in env:
        return "not recorded"
    have = env["cpu_flags"]
    lacks = [f for f in CPU_FLAGS if f not in have]
    return " ".join(have or ["none of " + ", ".join(CPU_FLAGS)]) + (
        f"; not {', '.join(lacks)}" if lacks and have else "")


def _peak_text(env: dict[str, Any]) -> str:
    peak = env.get("fma_peak")
    if not peak:
        return "not measured"
    if "error" in peak:
        return f"not measured: {peak['error']}"
    per = sorted(peak["gflops"].items(), key=lambda kv: int(kv[0]))
    figures = ", ".join(f"{g:.0f}{' GFLOP/s' if i == 0 else ''} on {n} "
                        f"thread{'s' if n != '1' else ''}" for i, (n, g) in enumerate(per))
    name = "BM_FmaPeakAvx512" if peak["isa"] == "avx512" else "BM_FmaPeakAvx2"
    return f"{figures} ({name}: `{peak['command']}`)"


def _command_text(results: dict[str, Any]) -> str:
    command = results.get("command")
    if not command:
        return "not recorded"
    make = results.get("make_command")
    return f"`{make}`, which ran `{command}`" if make else f"`{command}`"


def host_text(results: dict[str, Any]) -> str:
    """Where and what was measured, as plain lines, for the terminal."""
    env = results.get("environment", {})
    return "\n".join([
        f"host: {env.get('cpu', '?')}, {env.get('cores', '?')} cores; "
        f"CPU flags: {_flags_text(env)}",
        f"fp32 FMA peak: {_peak_text(env)}",
        f"commit {env.get('commit', '?')}, started {results.get('started', '?')}"]
        + ([f"baseline: commit {results['baseline']['commit']} of {results['baseline']['checkout']}"]
           if results.get("baseline") else []))


def _quick_note(settings: dict[str, Any]) -> list[str]:
    if not settings.get("quick"):
        return []
    return ["", f"**A quick run** (`--quick`): {', '.join(settings.get('models', []))} at "
            f"batch {', '.join(str(b) for b in settings.get('batch', []))}, up to "
            f"{settings.get('runs', '?')} timed calls a cell. Every model at batch 1 "
            "and 8 is `make bench` (about an hour on 2 cores)."]


def markdown(results: dict[str, Any], chart: str | None = None,
             causes: dict[tuple[str, str], str] | None = None) -> str:
    """The whole report as Markdown; `chart` is the chart's file name, beside
    it; `causes` as read_causes() gives them (default: bench/causes.txt)."""
    if causes is None:
        causes = read_causes()
    cells = _index(results)
    backends = _backends(results)
    refs = [b for b in backends if b != TARGET] if TARGET in backends else []
    env = results.get("environment", {})
    settings = results.get("settings", {})
    suite = settings.get("suite", "models")
    title = {"timm": "TIMM suite", "huggingface": "Hugging Face suite"}.get(suite,
                                                                          "Whole-model benchmark")
    lines = [f"# {title}", "",
             "Written by `bench/models/run.py` "
             f"(`{'make bench' if suite == 'models' else 'make bench-suites'}`); run it again rather "
             "than edit this file. Every model runs with random weights under each "
             "backend, in a child process of its own; see bench/README.md for what is "
             "measured and how."]
    lines += _quick_note(settings)
    took = f"; took {results['total_s'] / 60:.1f} min" if "total_s" in results else ""
    if results.get("resumed"):
        took += f" (interrupted and resumed at {', '.join(results['resumed'])})"
    facts = [
        ("command", _command_text(results)),
        ("commit", f"`{env['commit']}`" if env.get("commit") else "not recorded"),
    ] + ([("baseline", f"Kiln at `{results['baseline']['commit']}` (`run.py --baseline`), "
                       "timed in lockstep with the commit above")]
         if results.get("baseline") else []) + [
        ("date", f"{results.get('started', '?')}{took}"),
        ("host", f"{env.get('cpu', '?')}, {env.get('cores', '?')} cores "
                 f"({env.get('platform', '?')})"),
        ("CPU flags", _flags_text(env)),
        ("fp32 FMA peak", _peak_text(env)),
        ("threads", f"{env.get('threads', '?')} for every backend"),
        ("timing", f"median of up to {settings.get('runs', '?')} timed calls (at least "
                   f"{settings.get('min_runs', '?')}, fewer past {settings.get('max_seconds', '?')} "
                   f"s) after {settings.get('warmup', '?')} warm-up calls, dealt out in "
                   f"{settings.get('rounds', '?')} rounds in lockstep with the other backends"),
    ]
    loads = [x for c in results["cells"] for x in c.get("load", [])]
    if loads:
        facts.append(("load", f"1-minute load average {min(loads):.1f} to {max(loads):.1f} "
                              "around the cells (above the thread count: other work shared "
                              "the cores and latencies are inflated)"))
    if settings.get("dynamo_dict_tags"):
        facts.append(("Dynamo", "use_recursive_dict_tags_for_guards on for every backend "
                                "(--dynamo-dict-tags; off by default in PyTorch)"))
    versions = env.get("versions", {})
    if versions:
        facts.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items())))
    lines += ["", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in facts]

    all_geomeans = geomeans(results)
    if refs and all_geomeans:
        lines += ["", "## Geomeans", "",
                  f"Geomean of X ms / {TARGET} ms over the models where both ran correctly "
                  f"(above 1: {TARGET} is faster):", ""]
        rows = [[f"batch {batch}"] + [f"{g[r][0]:.2f}x (n={g[r][1]})" if r in g else "-"
                                      for r in refs]
                for batch, g in all_geomeans.items()]
        lines += _table([""] + [f"{TARGET} vs {r}" for r in refs], rows)
    summaries = summary(results)
    if TARGET in backends and summaries:
        lines += ["", "## Summary", "",
                  "Over the models eager runs: how many Kiln runs correctly, how many with "
                  "no node left in eager, and each backend's geomean speedup over eager "
                  "(eager ms / backend ms, over the models it ran correctly).", ""]
        others = [b for b in backends if b != "eager"]
        rows = []
        for batch, sm in summaries.items():
            row = [f"batch {batch}", f"{sm['kiln_correct']} / {sm['models']}",
                   f"{sm['kiln_no_eager_nodes']} / {sm['models']}"]
            row += [f"{sm['speedup_over_eager'][b][0]:.2f}x (n={sm['speedup_over_eager'][b][1]})"
                    if b in sm["speedup_over_eager"] else "-" for b in others]
            rows.append(row)
        lines += _table(["", "kiln correct", "kiln with no eager node"]
                        + [f"{b} over eager" for b in others], rows)
        eager_lists = [(c["model"], c["batch"], c["extra"]["eager_ops"]) for c in results["cells"]
                       if c["backend"] == TARGET and c.get("extra", {}).get("eager_ops")]
        if eager_lists:
            lines += ["", "Nodes Kiln left in eager, by op and reason:", ""]
            for model, batch, ops in eager_lists:
                listed = "; ".join(f"`{op}` x{n}" for op, n in list(ops.items())[:8])
                more = f"; and {len(ops) - 8} more" if len(ops) > 8 else ""
                lines.append(f"- {model} (batch {batch}): {listed}{more}")
    if TARGET in backends:
        lines += _behind_lines(results, causes)
    if chart:
        lines += ["", f"![Speedup of each backend over eager, per model]({chart})"]
    for batch in _batches(results):
        models = [m for m in _models(results) if any(
            (m, batch, b) in cells for b in backends)]
        lines += ["", f"## Batch {batch}", "",
                  "Median latency in ms (lower is better); `kiln vs X` = X ms / kiln ms "
                  "(above 1: kiln is faster); `kiln eager nodes` = FX nodes that ran in "
                  "eager PyTorch / all nodes; `(fallback)`: OpenVINO left part of the "
                  "model to PyTorch; `(seq)`: too large for the backends' processes to "
                  "wait side by side, timed one backend after another, not in lockstep.",
                  ""]
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


def can_chart() -> bool:
    """Whether matplotlib, which draws the charts, is installed (the
    benchmark's requirements have it; the project's own do not)."""
    import importlib.util
    return importlib.util.find_spec("matplotlib") is not None


def chart(results: dict[str, Any], path: str) -> None:
    """A PNG of every backend's speedup over eager, one panel per batch size
    (median latencies instead when eager was not run)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    # SVG: text as text (small, searchable) and no date or random ids, so
    # the same results give the same file.
    svg = path.endswith(".svg")
    if svg:
        matplotlib.rcParams["svg.fonttype"] = "none"
        matplotlib.rcParams["svg.hashsalt"] = "kiln-bench"

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
        # Plain numbers (0.5, 2) rather than powers of ten on the log axis;
        # of the minor ticks only 2, 3 and 5 times a power of ten, so the
        # labels do not crowd.
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if round(v / 10 ** math.floor(math.log10(v))) in (2, 3, 5)
            else ""))
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel("speedup over eager (log)" if with_eager else "median ms (log)")
        ax.set_title(f"batch {batch}, {results.get('environment', {}).get('threads', '?')} "
                     "threads (missing bar: failed or wrong)")
        ax.grid(axis="y", which="both", alpha=0.3)
        # Outside the axes, so it never hides a bar.
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Date": None} if svg else None)
    plt.close(fig)
