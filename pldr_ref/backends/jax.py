"""Alias of :mod:`pldr_ref.backends.jax_backend` under the name the issue tracker uses:
``--backend pldr_ref.backends.jax:JaxBackend`` works as well as ``pldr_ref.backends.jax_backend:JaxBackend``."""

from pldr_ref.backends.jax_backend import JaxBackend

__all__ = ["JaxBackend"]
