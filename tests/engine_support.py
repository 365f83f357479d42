"""Shared helpers of the engine tests (``tests/test_engine_*.py``): optional extras and the CI switch.

Without an extra (``pip install "pldr-ref[jax]"`` / ``[onnx]`` / ``[triton]``) its tests skip with the reason.
With ``PLDR_REF_REQUIRE_ENGINES=1`` (CI, where the extras are installed) a missing extra fails the tests
instead, so the engine tests cannot be skipped silently there.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest

#: Environment variable that turns a missing engine extra into a failure.
REQUIRE_ENV = "PLDR_REF_REQUIRE_ENGINES"

#: Extra name -> the modules it provides.
EXTRAS = {"jax": ("jax",), "onnx": ("onnx", "onnxruntime"), "triton": ("triton",), "torch": ("torch",),
          "fast": ("numba",)}


def engines_required() -> bool:
    """True when ``PLDR_REF_REQUIRE_ENGINES=1``."""
    return os.environ.get(REQUIRE_ENV, "") == "1"


def missing(extra: str) -> str | None:
    """Why the extra cannot be used (a module that does not import), or None."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"the [{extra}] extra is not installed ({module}: {exc}); pip install \"pldr-ref[{extra}]\""
    return None


def require(extra: str) -> Any:
    """Skip the calling test module when ``extra`` is missing -- or fail it under PLDR_REF_REQUIRE_ENGINES=1."""
    reason = missing(extra)
    if reason is None:
        return True
    if engines_required():
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
    return False


def scaled_rope_frequencies(rel: float):
    """An ONNX rewrite (a negative control of the long-position cases): every RoPE frequency constant (the
    ``omega*`` initializers) of the exported graph times (1 + rel); fails if the graph has none."""
    def rewrite(model):
        from onnx import numpy_helper

        hit = 0
        for t in model.graph.initializer:
            if t.name.startswith("omega"):
                a = numpy_helper.to_array(t)
                t.CopyFrom(numpy_helper.from_array((a * (1.0 + rel)).astype(a.dtype), t.name))
                hit += 1
        assert hit, "no RoPE frequency constant in the exported graph"
        return model
    return rewrite
