"""Hypothesis strategies shared by the checks: bounded floats and small matrices with edge shapes.

Shapes include the edge cases of the common brief (one row S = 1, one head, d_k = 2, d = 1).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


def reals(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Finite floats in [lo, hi] (no NaN, no inf)."""
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def vectors(min_n: int = 1, max_n: int = 8, lo: float = -10.0, hi: float = 10.0) -> st.SearchStrategy[np.ndarray]:
    """float64 vectors of length min_n..max_n with entries in [lo, hi]."""
    return st.integers(min_n, max_n).flatmap(lambda n: hnp.arrays(np.float64, (n,), elements=reals(lo, hi)))


def matrices(
    min_rows: int = 1, max_rows: int = 6, min_cols: int = 1, max_cols: int = 6, lo: float = -10.0, hi: float = 10.0
) -> st.SearchStrategy[np.ndarray]:
    """float64 matrices with min_rows..max_rows rows and min_cols..max_cols columns, entries in [lo, hi]."""
    shapes = st.tuples(st.integers(min_rows, max_rows), st.integers(min_cols, max_cols))
    return shapes.flatmap(lambda s: hnp.arrays(np.float64, s, elements=reals(lo, hi)))


def square_matrices(min_d: int = 1, max_d: int = 6, lo: float = -10.0, hi: float = 10.0) -> st.SearchStrategy:
    """float64 d x d matrices, d in min_d..max_d."""
    return st.integers(min_d, max_d).flatmap(lambda d: hnp.arrays(np.float64, (d, d), elements=reals(lo, hi)))


def seeds() -> st.SearchStrategy[int]:
    """Seeds for ``numpy.random.default_rng`` when a property needs structured random matrices."""
    return st.integers(0, 2**32 - 1)


@st.composite
def rows_with_support(
    draw: st.DrawFn, max_n: int = 12, lo: float = -50.0, hi: float = 50.0, nonempty: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(x, allowed): a score row of length 1..max_n and a support J (True = allowed), nonempty if asked."""
    n = draw(st.integers(1, max_n))
    x = draw(hnp.arrays(np.float64, (n,), elements=reals(lo, hi)))
    allowed = draw(hnp.arrays(np.bool_, (n,)))
    if nonempty and not allowed.any():
        allowed[draw(st.integers(0, n - 1))] = True
    return x, allowed


#: The sympy identities are checked for every matrix size / orbit length d = 1..MAX_D (or symbolically).
MAX_D = 8
