"""bench/models/report.py's list of the models where Kiln is behind a
reference: which models it names, with which ratios, and the cause the
causes file gives for the run's kind of host."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "models"))

import report  # noqa: E402  (bench/models/report.py)


def cell(model: str, backend: str, ms: float, correct: bool = True) -> dict:
    return {"model": model, "batch": 1, "backend": backend, "status": "ok",
            "latency_ms": ms, "correct": correct, "rel_err": 0.0, "compile_s": 1.0,
            "extra": {"nodes_in_eager": 0, "nodes_in_daemon": 10}}


def results(flags: list[str]) -> dict:
    return {"environment": {"cpu_flags": flags}, "settings": {"suite": "timm"},
            "cells": [cell("a", "eager", 10), cell("a", "onnxruntime", 4), cell("a", "kiln", 5),
                      cell("b", "eager", 10), cell("b", "onnxruntime", 6), cell("b", "kiln", 5),
                      # A reference that got the wrong answer is not "ahead".
                      cell("c", "eager", 10), cell("c", "onnxruntime", 1, correct=False),
                      cell("c", "kiln", 5)]}


def test_behind_names_each_faster_reference_with_its_ratio():
    assert report.behind(results(["avx2"])) == [(1, "a", [("onnxruntime", 0.8)])]


def test_the_cause_is_the_one_for_the_runs_kind_of_host(tmp_path):
    path = tmp_path / "causes.txt"
    path.write_text("# comment\n\na avx512: wide kernels\na any: a cause for every host\n")
    causes = report.read_causes(str(path))
    text = report.markdown(results(["avx2", "fma", "avx512f"]), causes=causes)
    assert "- a (batch 1): onnxruntime 0.80x. wide kernels" in text
    text = report.markdown(results(["avx2", "fma"]), causes=causes)
    assert "- a (batch 1): onnxruntime 0.80x. a cause for every host" in text
    assert "- b " not in text and "- c " not in text


def test_a_model_with_no_cause_says_it_is_not_profiled():
    text = report.markdown(results(["avx2"]), causes={})
    assert "- a (batch 1): onnxruntime 0.80x. not profiled yet" in text


@pytest.mark.parametrize("line", ["a: no host kind", "a avx9: unknown kind", "a avx2:",
                                  "a avx2 no colon"])
def test_a_malformed_line_names_its_file_and_line(tmp_path, line):
    path = tmp_path / "causes.txt"
    path.write_text(f"# first\n{line}\n")
    with pytest.raises(ValueError, match=f"{path}:2:"):
        report.read_causes(str(path))


def test_the_repositorys_causes_file_reads():
    report.read_causes()
