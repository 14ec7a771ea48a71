"""Integrations of the kiln backend with serving frameworks.

kiln.integrations.torchserve: a TorchServe handler that compiles the
archived model with backend="kiln" (TorchServe's own `pt2:` setting accepts
only a fixed list of backends).
"""
