"""Every workload the benchmark runs, by suite: "models", the list tuned and
tracked in models.py, and PyTorch's CPU benchmark suites in bench/suites/
("timm", "huggingface"), which nobody here tuned for."""
from __future__ import annotations

import os
import sys
from types import ModuleType

import models
from models import Workload

SUITES = ("models", "timm", "huggingface")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "suites"))


def _suite(suite: str) -> ModuleType:
    if suite == "timm":
        import timm_suite
        return timm_suite
    if suite == "huggingface":
        import huggingface_suite
        return huggingface_suite
    raise KeyError(f"unknown suite {suite!r}; valid: {', '.join(SUITES)}")


def names(suite: str) -> list[str]:
    """The suite's models, in its list's order."""
    if suite == "models":
        return list(models.MODELS)
    return list(_suite(suite).LISTED)


def build(suite: str, name: str, batch: int) -> Workload:
    """Model `name` of `suite` at batch size `batch` (KeyError names the valid ones)."""
    if suite == "models":
        return models.build(name, batch)
    if name not in names(suite):
        raise KeyError(f"unknown model {name!r} in suite {suite}; valid: "
                       f"{', '.join(names(suite))}")
    return _suite(suite).build(name, batch)
