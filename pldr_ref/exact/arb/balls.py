"""Ball tensors over FLINT's Arb (``python-flint``): exact conversion, matrix products, certified rounding.

A *ball tensor* is a NumPy ``object`` array whose entries are ``flint.arb`` balls [m +- r]; each
ball provably contains the real value it stands for.  Elementwise arithmetic uses NumPy's object
ufuncs (``+ - * /`` and ``np.exp`` / ``np.log`` / ``np.sqrt`` call the ball methods); every matrix
product goes through ``flint.arb_mat`` (FLINT's ball matrix multiplication), never a Python loop.

Every binary64 number is a dyadic rational of at most 53 bits, so :func:`balls` converts a float64
array to exact balls (radius 0) at any working precision.  The way back,
:func:`round_balls`, rounds both ends of each ball to the nearest binary64 (ties to even, gradual
underflow, overflow to +-inf) with integer arithmetic; when both ends give the same float64 bits,
that float64 is the correctly rounded value of the enclosed real (it is *certified*).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import mpmath
import numpy as np
from mpmath.libmp import from_man_exp

try:
    import flint
    from flint import arb, arb_mat
except ImportError as exc:  # pragma: no cover - python-flint is a core dependency; this guards broken installs
    raise ImportError("the arb engine needs python-flint (a core dependency of pldr-ref): "
                      "pip install python-flint") from exc

from pldr_ref.exact.numbers import BINARY32, round_mpf

#: Binary64 exponent range used by the fast rounding path: |x| < 2^-1076 rounds to +-0.0,
#: |x| >= 2^1024 overflows to +-inf; between, CPython's int -> float conversion and int / int
#: true division are correctly rounded (round half to even, subnormals included).
F64_UNDERFLOW_EXP = -1076
F64_OVERFLOW_EXP = 1024

#: Smallest working precision the precision-follows-accuracy rule goes down to (bits).
MIN_PREC = 96
#: Bits kept above a tensor's normwise accuracy when the working precision follows it.
GUARD_BITS = 32

ZERO = arb(0)
ONE = arb(1)


@contextlib.contextmanager
def working_precision(prec: int) -> Iterator[None]:
    """Set FLINT's working precision to ``prec`` bits inside the block (restored afterwards)."""
    if isinstance(prec, bool) or not isinstance(prec, int) or prec < 2:
        raise ValueError(f"precision must be an int >= 2 bits, got {prec!r}")
    saved = flint.ctx.prec
    flint.ctx.prec = prec
    try:
        yield
    finally:
        flint.ctx.prec = saved


def lower_precision_to(bits: float) -> None:
    """Lower FLINT's working precision to ``bits`` (never raise it; at least :data:`MIN_PREC`).

    Balls carry their own error bound, so once their accuracy is ``a`` bits, working at a + guard
    bits adds a negligible rounding error and saves the cost of carrying digits that are noise.
    """
    if math.isfinite(bits):
        flint.ctx.prec = max(MIN_PREC, min(flint.ctx.prec, int(bits)))


# ----------------------------------------------------------------------------- conversion
def balls(x: Any) -> np.ndarray:
    """Float64 array (any shape) -> ball tensor of exact balls (radius 0; valid at every precision)."""
    a = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError("ball tensors hold finite values only (masks are applied separately)")
    out = np.empty(a.shape, dtype=object)
    flat = out.reshape(-1)
    flat[:] = [arb(v) for v in a.reshape(-1).tolist()]
    return out


def ball(x: float) -> arb:
    """The exact ball of one binary64 value."""
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"ball() needs a finite value, got {v}")
    return arb(v)


def to_mat(x: np.ndarray) -> arb_mat:
    """2-D ball tensor or float64 array -> ``arb_mat`` (float64 entries converted exactly)."""
    if x.ndim != 2:
        raise ValueError(f"to_mat needs a 2-D array, got shape {x.shape}")
    return arb_mat(x.tolist()) if x.size else arb_mat(x.shape[0], x.shape[1])


def from_mat(m: arb_mat) -> np.ndarray:
    """``arb_mat`` -> 2-D ball tensor."""
    out = np.empty((m.nrows(), m.ncols()), dtype=object)
    out.reshape(-1)[:] = m.entries()
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(A B)_{ij} = sum_k A_ik B_kj for 2-D ``a`` [m, k] and ``b`` [k, n] (balls or float64) via ``arb_mat``."""
    if a.shape[-1] != b.shape[0]:
        raise ValueError(f"matmul shapes {a.shape} and {b.shape} do not match")
    return from_mat(to_mat(a) * to_mat(b))


def batched_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Matrix product over the last two axes with equal leading shapes: [..., m, k] x [..., k, n]."""
    if a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"batched_matmul leading shapes {a.shape[:-2]} and {b.shape[:-2]} differ")
    lead = a.shape[:-2]
    a2 = a.reshape(-1, *a.shape[-2:])
    b2 = b.reshape(-1, *b.shape[-2:])
    out = np.empty((a2.shape[0], a.shape[-2], b.shape[-1]), dtype=object)
    for i in range(a2.shape[0]):  # one FLINT product per (batch, head) block
        out[i] = matmul(a2[i], b2[i])
    return out.reshape(*lead, a.shape[-2], b.shape[-1])


# ----------------------------------------------------------------------------- rounding
def _dyadic_to_float64(man: int, exp: int) -> float:
    """man * 2^exp rounded to the nearest binary64 (ties to even), +-inf on overflow, signed zero on underflow."""
    if man == 0:
        return 0.0
    top = exp + abs(man).bit_length()  # |x| < 2^top
    if top > F64_OVERFLOW_EXP + 1:
        return -math.inf if man < 0 else math.inf
    if top < F64_UNDERFLOW_EXP:
        return -0.0 if man < 0 else 0.0
    try:
        v = float(man << exp) if exp >= 0 else man / (1 << -exp)
    except OverflowError:
        return -math.inf if man < 0 else math.inf
    return v if v != 0 else (-0.0 if man < 0 else 0.0)


def endpoint_floats(v: arb) -> tuple[float, float]:
    """(RN(lower end), RN(upper end)) of the ball ``v`` as binary64 values; NaN for a non-finite ball."""
    if not v.is_finite():
        return math.nan, math.nan
    lo_m, lo_e = v.lower().man_exp()
    hi_m, hi_e = v.upper().man_exp()
    return _dyadic_to_float64(int(lo_m), int(lo_e)), _dyadic_to_float64(int(hi_m), int(hi_e))


def _same_bits(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def round_ball(v: arb, *, nonneg: bool = False) -> tuple[float, bool]:
    """(float64, certified): the correctly rounded value of the real in ``v`` when both ends agree.

    ``nonneg`` states that the enclosed real is known to be >= 0 (an exponential, a softmax weight,
    iSwiGLU): a lower end rounding to -0.0 is then read as +0.0.  An undecided ball returns the
    rounding of its midpoint with ``certified=False``.
    """
    lo, hi = endpoint_floats(v)
    if nonneg and lo == 0:
        lo = 0.0
    if _same_bits(lo, hi):
        return lo, True
    if not v.is_finite():
        return math.nan, False
    m, e = v.mid().man_exp()
    return _dyadic_to_float64(int(m), int(e)), False


def round_balls(x: np.ndarray, *, nonneg: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Round every ball of ``x``: (float64 array, bool array ``certified``) of the same shape."""
    flat = x.reshape(-1)
    vals = np.empty(flat.shape, dtype=np.float64)
    ok = np.empty(flat.shape, dtype=bool)
    for i, v in enumerate(flat.tolist()):
        vals[i], ok[i] = round_ball(v, nonneg=nonneg)
    return vals.reshape(x.shape), ok.reshape(x.shape)


def _log2_abs(man: int, exp: int) -> tuple[int, float]:
    """log2|man 2^exp| as (integer part, fraction in [-1, 0)), without converting the exponent to a float.

    Arb exponents are unbounded integers: e^(-1.8e308) has a binary exponent near -2.6e308, which no
    float holds; the integer part stays a Python int so that such balls compare and subtract exactly.
    """
    m = abs(man)
    top = m.bit_length()
    return exp + top, math.log2(m) - top


def _bits_to_float(whole: int, frac: float) -> float:
    """whole + frac as a float, +-inf beyond the float range (a difference of two unbounded exponents)."""
    if abs(whole) > 1 << 1000:
        return math.inf if whole > 0 else -math.inf
    return float(whole) + frac


def accuracy_bits(x: np.ndarray) -> float:
    """Normwise accuracy of a ball tensor: -log2(max radius / max |midpoint|) (inf if all exact).

    -inf when some ball is not finite or no midpoint is non-zero while some radius is; exponents of
    any size (e^(-1.8e308) under a finfo.min mask) are handled exactly (+-inf beyond the float range).
    """
    rad: tuple[int, float] | None = None
    mag: tuple[int, float] | None = None
    for v in x.reshape(-1).tolist():
        if not v.is_finite():
            return -math.inf
        r_m, r_e = v.rad().man_exp()
        m_m, m_e = v.mid().man_exp()
        if int(r_m):
            r = _log2_abs(int(r_m), int(r_e))
            rad = r if rad is None else max(rad, r)
        if int(m_m):
            m = _log2_abs(int(m_m), int(m_e))
            mag = m if mag is None else max(mag, m)
    if rad is None:
        return math.inf
    if mag is None:
        return -math.inf
    return _bits_to_float(mag[0] - rad[0], mag[1] - rad[1])


def outward_bounds(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(RD(lower end), RU(upper end)) of every ball of ``x`` as float64 arrays: a float64 interval that contains
    the ball, hence the real it encloses (-inf / +inf for a ball that is not finite)."""
    flat = x.reshape(-1).tolist()
    lo = np.empty(len(flat), dtype=np.float64)
    hi = np.empty(len(flat), dtype=np.float64)
    for i, v in enumerate(flat):
        if not v.is_finite():
            lo[i], hi[i] = -math.inf, math.inf
            continue
        lo_m, lo_e = v.lower().man_exp()
        hi_m, hi_e = v.upper().man_exp()
        lo[i] = round_mpf(_mpf(int(lo_m), int(lo_e)), mode="down")
        hi[i] = round_mpf(_mpf(int(hi_m), int(hi_e)), mode="up")
    return lo.reshape(x.shape), hi.reshape(x.shape)


def round_ball_to_float32(v: arb) -> arb | None:
    """RN32 of the real in ``v`` as an exact ball, or None when the ball straddles a binary32 rounding boundary."""
    if not v.is_finite():
        return None
    lo_m, lo_e = v.lower().man_exp()
    hi_m, hi_e = v.upper().man_exp()
    lo = round_mpf(_mpf(int(lo_m), int(lo_e)), BINARY32)
    hi = round_mpf(_mpf(int(hi_m), int(hi_e)), BINARY32)
    return arb(lo) if _same_bits(lo, hi) else None


def _mpf(man: int, exp: int) -> mpmath.mpf:
    """The exact ``mpf`` man * 2^exp (no rounding)."""
    return mpmath.mp.make_mpf(from_man_exp(man, exp))
