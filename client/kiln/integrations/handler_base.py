"""The base class of kiln.integrations.torchserve.KilnHandler.

Inside TorchServe it is TorchServe's BaseHandler, so a KilnHandler keeps
what BaseHandler gives (its `handle` with the HandlerTime metric, describe
requests, the profiler switch). Without TorchServe installed (unit use,
or a server speaking the same contract) it is a minimal stand-in with the
same `handle` flow. It lives in its own module because TorchServe loads a
handler module by requiring exactly one class defined in it.
"""
from __future__ import annotations

import time
from typing import Any

try:
    from ts.torch_handler.base_handler import BaseHandler
except ImportError:  # TorchServe is not installed: the contract without it
    class BaseHandler:  # type: ignore[no-redef]
        def __init__(self) -> None:
            self.model = None
            self.device = None
            self.initialized = False
            self.context = None
            self.manifest = None
            self.map_location = None

        def handle(self, data: list, context: Any) -> list:
            start = time.time()
            self.context = context
            output = self.postprocess(self.inference(self.preprocess(data)))
            metrics = getattr(context, "metrics", None)
            if metrics is not None:
                metrics.add_time("HandlerTime", round((time.time() - start) * 1000, 2), None, "ms")
            return output
