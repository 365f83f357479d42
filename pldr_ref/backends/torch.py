"""Alias of :mod:`pldr_ref.backends.torch_backend` under the name used by the issue tracker:
``--backend pldr_ref.backends.torch:TorchBackend`` works as well as ``pldr_ref.backends.torch_backend:TorchBackend``."""

from pldr_ref.backends.torch_backend import TorchBackend

__all__ = ["TorchBackend"]
