"""Rounding budgets of the float64 checks (the catalog's convention, ``audit/NUMERICAL_COMPARISON.md``).

u = 2^-53 is the unit roundoff of binary64; gamma(n) = n u / (1 - n u) bounds the relative
error of an n-term sum or product evaluated in any order (Higham, Thm. 3.1).
"""

from __future__ import annotations

import numpy as np

#: Unit roundoff of IEEE-754 binary64.
UNIT_ROUNDOFF: float = 2.0**-53


#: Absolute error of one operation in the subnormal range, where relative bounds fail (below 2^-1022).
SUBNORMAL_FLOOR: float = float(np.finfo(np.float64).smallest_subnormal)


def gamma(n: int | float) -> float:
    """gamma(n) = n u / (1 - n u), the classical bound on n accumulated roundings (requires n u < 1)."""
    nu = float(n) * UNIT_ROUNDOFF
    if nu >= 1.0:
        raise ValueError(f"gamma({n}) is undefined: n u >= 1")
    return nu / (1.0 - nu)


def close(actual: np.ndarray, expected: np.ndarray, atol: float, rtol: float = 0.0) -> bool:
    """|a - e| <= atol + rtol * max(|a|, |e|) entrywise, with NaN counted as a failure."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    bound = atol + rtol * np.maximum(np.abs(a), np.abs(e))
    return bool(np.all(np.abs(a - e) <= bound))
