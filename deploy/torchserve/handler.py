"""The example's handler: KilnHandler (model loading, torch.compile with
backend="kiln", warm-up, JSON/torch.save requests) with a postprocess of
its own that answers class probabilities."""
import torch

from kiln.integrations.torchserve import KilnHandler


class ClassifierHandler(KilnHandler):
    def postprocess(self, data: torch.Tensor) -> list:
        return super().postprocess(torch.softmax(data, dim=1))
