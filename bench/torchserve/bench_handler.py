"""The benchmark's handler: KilnHandler with the compile step chosen by
model-config.yaml's `bench: {backend: kiln|eager|inductor}`, and answers
that name the worker (its pid), so the benchmark can tell when each worker
first answered. Eager and Inductor workers load their weights the way
TorchServe's BaseHandler does (torch.load into each worker's memory);
Kiln's handler maps them from the archive (kiln/integrations/torchserve.py)."""
import os
from typing import Any, Mapping

import torch

from kiln.integrations.torchserve import KilnHandler, load_model_class


class BenchHandler(KilnHandler):
    def backend_name(self) -> str:
        return self.model_yaml_config["bench"]["backend"]

    def load_model(self, model_dir: str, manifest: Mapping[str, Any]) -> torch.nn.Module:
        if self.backend_name() == "kiln":
            return super().load_model(model_dir, manifest)
        model = load_model_class(model_dir, manifest["model"]["modelFile"])()
        weights = os.path.join(model_dir, manifest["model"]["serializedFile"])
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        return model

    def compile(self, model: torch.nn.Module) -> Any:
        backend = self.backend_name()
        if backend == "kiln":
            return super().compile(model)
        if backend == "eager":
            return model
        return torch.compile(model, backend=backend)

    def postprocess(self, data: Any) -> list:
        return [{"pid": os.getpid(), "output": out} for out in super().postprocess(data)]
