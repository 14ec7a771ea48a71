"""The base class of kiln.integrations.torchserve.KilnHandler: TorchServe's
handler contract (initialize/preprocess/inference/postprocess/handle, the
HandlerTime metric) without importing TorchServe's BaseHandler.

Importing ts.torch_handler.base_handler probes for every optional backend
installed (OpenVINO, ONNX Runtime, TensorRT, IPEX) and imports them: with
OpenVINO and ONNX Runtime installed that took 4.0 s and 233 MiB of resident
memory per worker here (`python -c "import torch; import
ts.torch_handler.base_handler"`, max RSS 508 -> 741 MiB), paid again by
every worker process. A Kiln worker needs none of them. TorchServe calls a
handler class only through this contract. It lives in its own module
because TorchServe loads a handler module by requiring exactly one class
defined in it.
"""
from __future__ import annotations

import time
from typing import Any


class HandlerBase:
    def __init__(self) -> None:
        self.model: Any = None
        self.device: Any = None
        self.initialized = False
        self.context: Any = None
        self.manifest: Any = None
        self.map_location: str | None = None

    def initialize(self, context: Any) -> None:
        raise NotImplementedError

    def preprocess(self, data: list) -> Any:
        raise NotImplementedError

    def inference(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def postprocess(self, data: Any) -> list:
        raise NotImplementedError

    def handle(self, data: list, context: Any) -> list:
        """TorchServe's entry point: one response per request in `data`."""
        start = time.time()
        self.context = context
        output = self.postprocess(self.inference(self.preprocess(data)))
        metrics = getattr(context, "metrics", None)
        if metrics is not None:
            metrics.add_time("HandlerTime", round((time.time() - start) * 1000, 2), None, "ms")
        return output
