"""Round-to-nearest-even of float64 values into bfloat16, float16 and float32, owned by pldr_ref.

Why own it: every committed or compared low-precision number (the naive-run baselines in ``case.json``,
the harness's rounded references) must not depend on a library version.  ml_dtypes 0.6.0 rounds
float64 -> bfloat16 through float32 (two roundings: ``1 + 2^-8 + 2^-30`` becomes 1.0), 0.7.0 rounds once
(1.0078125); the suite must read the same under both.  ml_dtypes stays in use for dtype objects and bit
views only.

Math (IEEE 754 binary formats with precision ``p`` significand bits, including the implicit one, and
normal exponent range ``[emin, emax]``).  For finite ``x = m 2^e`` with ``1 <= |m| < 2``, the spacing of
the target format around ``x`` is the quantum

    q(x) = 2^(max(e, emin) - p + 1),

the same for normal numbers (``e >= emin``) and for the subnormal range (``e < emin``, fixed spacing
``2^(emin - p + 1)``).  The correctly rounded value is ``rint(x / q) * q`` with ``rint`` rounding ties to
even; both scalings are by powers of two and therefore exact in float64 (``x / q < 2^p`` and
``q >= 2^-149`` never leave float64's normal range), so exactly one rounding happens.  With the exponent
unbounded, a value at or beyond ``max + q/2`` rounds to ``2^(emax + 1)``; IEEE's overflow rule for
round-to-nearest then gives ``+-inf`` for every result above ``max = (2 - 2^(1-p)) 2^emax``.  Zeros keep
their sign (``rint(-0.3) = -0.0``), infinities and NaN pass through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE 754 binary format: ``precision`` significand bits (with the implicit bit), normal exponents
    ``emin .. emax``."""

    name: str
    precision: int
    emin: int
    emax: int

    @property
    def max(self) -> float:
        """Largest finite value ``(2 - 2^(1-p)) 2^emax``."""
        return float(np.ldexp(2.0 - np.ldexp(1.0, 1 - self.precision), self.emax))

    @property
    def smallest_normal(self) -> float:
        """``2^emin``."""
        return float(np.ldexp(1.0, self.emin))

    @property
    def smallest_subnormal(self) -> float:
        """``2^(emin - p + 1)``, the spacing of the subnormal range."""
        return float(np.ldexp(1.0, self.emin - self.precision + 1))

    @property
    def eps(self) -> float:
        """Spacing of the format at 1: ``2^(1 - p)``."""
        return float(np.ldexp(1.0, 1 - self.precision))


#: bfloat16: 8 significand bits, float32's exponent range.
BFLOAT16 = FloatFormat("bfloat16", precision=8, emin=-126, emax=127)
#: IEEE binary16.
FLOAT16 = FloatFormat("float16", precision=11, emin=-14, emax=15)
#: IEEE binary32.
FLOAT32 = FloatFormat("float32", precision=24, emin=-126, emax=127)
#: Formats by name.
FORMATS: dict[str, FloatFormat] = {f.name: f for f in (BFLOAT16, FLOAT16, FLOAT32)}


def float_format(dtype: Any) -> FloatFormat | None:
    """The :class:`FloatFormat` of ``dtype`` (a FloatFormat, a name such as ``"bfloat16"``, or a NumPy /
    ml_dtypes dtype-like); None for float64, which needs no rounding.  Anything else raises ``ValueError``."""
    if isinstance(dtype, FloatFormat):
        return dtype
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name == "float64":
        return None
    if name not in FORMATS:
        raise ValueError(f"no rounding to {name!r}: known formats are {sorted(FORMATS)} and float64")
    return FORMATS[name]


def round_to_format(x: Any, fmt: FloatFormat | str | Any) -> np.ndarray:
    """``x`` (converted to float64) rounded to nearest, ties to even, into ``fmt`` and widened back to float64.

    Shapes: any array shape, returned unchanged.  Vectorized, one rounding per element (module docstring):
    subnormals of the target are produced, results above the format's largest finite value become
    ``+-inf``, zeros keep their sign, infinities and NaN pass through.  ``fmt`` float64 returns a copy."""
    f = float_format(fmt)
    a = np.array(x, dtype=np.float64)
    if f is None:
        return a
    finite = np.isfinite(a)
    _, e2 = np.frexp(np.where(finite, a, 0.0))  # a = m 2^e2, 0.5 <= |m| < 1: the IEEE exponent is e2 - 1
    shift = (np.maximum(e2 - 1, f.emin) - f.precision + 1).astype(np.int32)
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.ldexp(np.rint(np.ldexp(a, -shift)), shift)
        y = np.where(np.abs(y) > f.max, np.copysign(np.inf, a), y)
    return np.where(finite, y, a)


__all__ = ["BFLOAT16", "FLOAT16", "FLOAT32", "FORMATS", "FloatFormat", "float_format", "round_to_format"]
