"""Type check of what a backend or engine returns, before any value is compared.

A float trace entry must come back as a floating array: NumPy float16/32/64, or an ``ml_dtypes`` float
(``bfloat16``, ``float8_*``: JAX and ONNX Runtime return those), widened here exactly to float64.  A string,
object, boolean or integer array for a float entry is refused -- never converted with ``astype(float64)``, which
would parse text ("1.5") or turn a mask into numbers.  A boolean entry (masks) takes a boolean or integer array.
:func:`checked_outputs` is called where a backend's outputs are received (:func:`pldr_ref.harness.validate.
validate_case`); :func:`output_type_problem` also by :func:`pldr_ref.harness.verdict.localize.judge` (isolated stages).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: ml_dtypes floating types accepted for a float entry (by dtype name), widened exactly to float64.
ML_DTYPES_FLOATS = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                    "float8_e4m3b11fnuz")
#: The most output names one error message lists.
LISTED_PROBLEMS = 3


class OutputTypeError(TypeError):
    """A backend output of the wrong type for its trace entry; the message names the outputs and their types."""


def is_float_dtype(dtype: np.dtype) -> bool:
    """NumPy floating, or one of :data:`ML_DTYPES_FLOATS`."""
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.name in ML_DTYPES_FLOATS)


def output_type_problem(expected: Any, actual: Any) -> str | None:
    """Why ``actual`` cannot stand for the golden entry ``expected`` (None when its type fits): see the module
    docstring.  Never converts ``actual``."""
    want = np.asarray(expected).dtype
    if isinstance(actual, (str, bytes)):
        return f"a {type(actual).__name__}, not an array"
    try:
        got = np.asarray(actual).dtype
    except Exception as exc:  # an object whose __array__ raises
        return f"not an array ({type(exc).__name__}: {exc})"
    if want.kind == "f":
        if not is_float_dtype(got):
            return f"dtype {got} for a float entry (a floating array is required; it is never parsed or converted)"
    elif want.kind == "b":
        if got.kind not in "biu":
            return f"dtype {got} for a boolean entry (a boolean or integer array is required)"
    elif got.kind not in "biu":
        return f"dtype {got} for an integer entry"
    return None


def widened(actual: Any) -> np.ndarray:
    """``actual`` as an array; an ``ml_dtypes`` float widened exactly to float64, anything else unchanged."""
    arr = np.asarray(actual)
    return arr.astype(np.float64) if arr.dtype.kind == "V" and arr.dtype.name in ML_DTYPES_FLOATS else arr


def checked_outputs(expected: Mapping[str, Any], produced: Mapping[str, Any]) -> dict[str, Any]:
    """``produced`` with every output that has a golden entry type-checked (:func:`output_type_problem`) and
    ``ml_dtypes`` floats widened; OutputTypeError naming the bad outputs.  Outputs without a golden entry and
    None (not produced) pass through untouched."""
    out: dict[str, Any] = {}
    problems = []
    for name, value in produced.items():
        if value is None or name not in expected:
            out[name] = value
            continue
        why = output_type_problem(expected[name], value)
        if why is not None:
            problems.append(f"{name}: {why}")
        else:
            out[name] = widened(value)
    if problems:
        more = f" (and {len(problems) - LISTED_PROBLEMS} more)" if len(problems) > LISTED_PROBLEMS else ""
        raise OutputTypeError(f"{len(problems)} output(s) of the wrong type: " + "; ".join(problems[:LISTED_PROBLEMS])
                              + more)
    return out


__all__ = ["OutputTypeError", "checked_outputs", "is_float_dtype", "output_type_problem", "widened"]
