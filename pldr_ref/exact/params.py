"""Exact views of the float64 parameters: every array becomes nested lists of exact ``mpf`` values.

Only the structure of :class:`pldr_ref.params.LayerParams` (and its nested named tuples) is
reused; values are converted with :func:`pldr_ref.exact.numbers.to_mp`, which is exact at any
working precision, so one conversion serves every precision of the guard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.exact.numbers import to_mp


def exact_tree(obj: Any) -> Any:
    """Convert arrays inside (named) tuples and mappings (``LayerParams.extra``) to exact nested lists; None stays
    None."""
    if obj is None:
        return None
    if isinstance(obj, np.ndarray):
        return to_mp(obj)
    if isinstance(obj, Mapping):
        return {k: exact_tree(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        items = [exact_tree(x) for x in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    raise TypeError(f"cannot convert parameter of type {type(obj).__name__} to exact values")
