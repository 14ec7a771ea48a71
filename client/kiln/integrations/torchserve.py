"""TorchServe handler that compiles the archived model with backend="kiln".

TorchServe's `pt2:` setting in model-config.yaml accepts a fixed list of
backend names and runs eager for any other, so Kiln ships this handler.
Every worker process compiles through the same kilnd: the first worker's
compile is the only one (the others get the daemon's compiled graph), and
the weights are uploaded once by content hash and held once in the daemon.

Use it as the archive's handler directly:

    torch-model-archiver --model-name m --version 1.0 --model-file model.py \
        --serialized-file weights.pt --handler kiln.integrations.torchserve \
        --config-file model-config.yaml

or subclass KilnHandler in a handler file of your own to change
preprocess/postprocess (deploy/torchserve/ has a complete example).

model-config.yaml, besides TorchServe's own keys, takes a `kiln:` section:

    kiln:
      options: {model_caching: true}   # torch.compile(..., options=...) for backend="kiln"
      dynamic: false                   # torch.compile's dynamic= (default: None, Dynamo decides)
      fullgraph: false                 # torch.compile's fullgraph=
      input_dtype: float32             # dtype of tensors built from JSON requests
      warmup:                          # inputs run once in initialize(), so the first
        - shape: [1, 3, 224, 224]      # request does not wait for the compile
          dtype: float32

Requests: a JSON body holding a nested list (or {"inputs": <nested list>}),
or a tensor saved with torch.save. Each request is one batch (a missing
batch dimension is added when `warmup` tells the per-sample rank); the
requests TorchServe batches together run as one call and are split back.
Responses: the output as nested lists (a list/tuple/dict of tensors keeps
its structure).
"""
from __future__ import annotations

import importlib
import inspect
import io
import json
import logging
import os
import sys
import time
from typing import Any, Mapping

import torch

from kiln.integrations.handler_base import HandlerBase

log = logging.getLogger("kiln.torchserve")

KILN_SECTION_KEYS = ("options", "dynamic", "fullgraph", "input_dtype", "warmup")


def _kiln_section(model_yaml_config: Mapping[str, Any] | None) -> dict[str, Any]:
    section = dict((model_yaml_config or {}).get("kiln") or {})
    unknown = sorted(set(section) - set(KILN_SECTION_KEYS))
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)} in the kiln: section of model-config.yaml; "
            f"valid keys: {', '.join(KILN_SECTION_KEYS)}")
    return section


def _dtype(name: Any) -> torch.dtype:
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"'{name}' is not a torch dtype (e.g. float32, int64)")
    return dtype


def _warmup_specs(section: Mapping[str, Any]) -> list[tuple[list[int], torch.dtype]]:
    specs = section.get("warmup") or []
    if isinstance(specs, Mapping):
        specs = [specs]
    out = []
    for spec in specs:
        shape = spec.get("shape") if isinstance(spec, Mapping) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"kiln.warmup entries need shape: [ints >= 0], got {spec!r}")
        out.append((shape, _dtype(spec.get("dtype", section.get("input_dtype", "float32")))))
    return out


def load_model_class(model_dir: str, model_file: str) -> type[torch.nn.Module]:
    """The one nn.Module subclass defined in the archive's model file."""
    path = os.path.join(model_dir, model_file)
    if not os.path.isfile(path):
        raise RuntimeError(f"the archive's model file {model_file} is not in {model_dir}")
    if model_dir not in sys.path:
        sys.path.insert(0, model_dir)
    module = importlib.import_module(os.path.splitext(os.path.basename(model_file))[0])
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if c.__module__ == module.__name__ and issubclass(c, torch.nn.Module)]
    if len(classes) != 1:
        raise ValueError(
            f"{model_file} must define exactly one torch.nn.Module subclass, found "
            f"{[c.__name__ for c in classes]}")
    return classes[0]


def load_archived_model(model_dir: str, manifest: Mapping[str, Any]) -> torch.nn.Module:
    """The model an archive describes: modelFile's module class with
    serializedFile as its state dict, or a torch.export program (.pt2)."""
    model_meta = manifest.get("model", {})
    model_file = model_meta.get("modelFile")
    serialized = model_meta.get("serializedFile")
    weights = os.path.join(model_dir, serialized) if serialized else None
    if model_file:
        model = load_model_class(model_dir, model_file)()
        if weights:
            # weights_only: an archive's weights must not run code on load.
            # mmap + assign: the parameters are the file's pages, which every
            # worker of the model maps from the one extracted archive, so the
            # workers hold one copy between them (the daemon holds the packed
            # copy its kernels read) instead of one each.
            state = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
            model.load_state_dict(state, assign=True)
        return model
    if weights and weights.endswith(".pt2"):
        return torch.export.load(weights).module()
    raise RuntimeError(
        "the archive needs --model-file (an nn.Module class, with --serialized-file as its "
        "state dict) or a torch.export program (.pt2) as --serialized-file")


def _decode(row: Mapping[str, Any], dtype: torch.dtype) -> torch.Tensor:
    body = row.get("data")
    if body is None:
        body = row.get("body")
    if isinstance(body, (bytes, bytearray)):
        raw = bytes(body)
        if raw[:2] == b"PK":  # torch.save's zip format
            value = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
            if not isinstance(value, torch.Tensor):
                raise ValueError("a torch.save request body must hold one tensor")
            return value
        body = json.loads(raw.decode("utf-8"))
    if isinstance(body, str):
        body = json.loads(body)
    if isinstance(body, Mapping):
        if "inputs" not in body:
            raise ValueError("a JSON object request needs an 'inputs' key")
        body = body["inputs"]
    return torch.as_tensor(body, dtype=dtype)


def _split(output: Any, sizes: list[int]) -> list[Any]:
    """One response per request: `output` cut along dim 0 by `sizes`."""
    if isinstance(output, torch.Tensor):
        return [part.tolist() for part in torch.split(output, sizes)]
    if isinstance(output, (list, tuple)):
        parts = [_split(o, sizes) for o in output]
        return [[p[i] for p in parts] for i in range(len(sizes))]
    if isinstance(output, Mapping):
        parts = {k: _split(v, sizes) for k, v in output.items()}
        return [{k: v[i] for k, v in parts.items()} for i in range(len(sizes))]
    if hasattr(output, "to_tuple"):  # transformers' ModelOutput
        return _split(output.to_tuple(), sizes)
    raise TypeError(f"cannot turn a model output of type {type(output).__name__} into a response")


class KilnHandler(HandlerBase):
    """TorchServe handler: loads the archived model, compiles it with
    backend="kiln", warms it up, serves tensors given as JSON or torch.save.

    Override load_model, compile, preprocess or postprocess to change one
    step; initialize/handle follow TorchServe's BaseHandler contract
    (kiln/integrations/handler_base.py says why it is not a subclass).
    """

    def __init__(self) -> None:
        super().__init__()
        self.kiln_config: dict[str, Any] = {}
        self.input_dtype = torch.float32
        self.sample_rank: int | None = None
        self.batch_sizes: list[int] = []
        self.initialize_seconds: float | None = None

    # --- TorchServe contract -------------------------------------------------
    def initialize(self, context: Any) -> None:
        start = time.monotonic()
        self.context = context
        self.manifest = context.manifest
        self.model_yaml_config = getattr(context, "model_yaml_config", None) or {}
        self.kiln_config = _kiln_section(self.model_yaml_config)
        self.input_dtype = _dtype(self.kiln_config.get("input_dtype", "float32"))
        warmup = _warmup_specs(self.kiln_config)
        if warmup:
            self.sample_rank = len(warmup[0][0]) - 1
        self.device = torch.device("cpu")
        self.map_location = "cpu"
        model = self.load_model(context.system_properties["model_dir"], self.manifest)
        model.eval()
        self.model = self.compile(model)
        for shape, dtype in warmup:
            # Made outside inference mode, like a request's tensor: an
            # inference tensor would fail Dynamo's guards at the first
            # request and compile the model a second time.
            self.inference(torch.zeros(shape, dtype=dtype))
        self.initialize_seconds = time.monotonic() - start
        log.info("model %s ready in %.2f s (compiled with %s, %d warm-up input(s))",
                 getattr(context, "model_name", "?"), self.initialize_seconds,
                 self.backend_name(), len(warmup))
        self.initialized = True

    def preprocess(self, data: list) -> torch.Tensor:
        batches = []
        for row in data:
            t = _decode(row, self.input_dtype)
            if self.sample_rank is not None and t.dim() == self.sample_rank:
                t = t.unsqueeze(0)
            if t.dim() == 0:
                raise ValueError("a request must hold a batch (a tensor with a leading dimension)")
            batches.append(t)
        self.batch_sizes = [b.shape[0] for b in batches]
        return batches[0] if len(batches) == 1 else torch.cat(batches)

    def inference(self, data: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        with torch.inference_mode():
            return self.model(data, *args, **kwargs)

    def postprocess(self, data: Any) -> list:
        return _split(data, self.batch_sizes)

    # --- Steps a subclass may replace ---------------------------------------
    def load_model(self, model_dir: str, manifest: Mapping[str, Any]) -> torch.nn.Module:
        return load_archived_model(model_dir, manifest)

    def backend_name(self) -> str:
        return "kiln"

    def compile(self, model: torch.nn.Module) -> Any:
        """torch.compile(model, backend="kiln") with the kiln: section's
        options. The options are checked here, so a typo fails the model's
        load in TorchServe's log rather than its first request."""
        from kiln.options import KilnOptions
        options = dict(self.kiln_config.get("options") or {})
        KilnOptions.from_mapping(options)
        return torch.compile(model, backend="kiln", options=options,
                             dynamic=self.kiln_config.get("dynamic"),
                             fullgraph=bool(self.kiln_config.get("fullgraph", False)))
