"""Per-tensor comparison of a backend output against a golden value.

The comparison is asymmetric on purpose: ``expected`` is always the golden (float64) value
and ``actual`` the backend's output.  Reported per tensor:

* max and median absolute error |a - e| and relative error |a - e| / |e| over the elements
  where both are finite (relative error of a nonzero value against an exact 0 is +inf);
* the max ULP distance in the backend's dtype, between ``actual`` and ``expected`` rounded to
  that dtype (so a backend returning the correctly rounded value scores 0);
* the number of mismatching elements for a given absolute allowance, and the worst index;
* NaN, +inf and -inf mismatches as three separate classes (an element is a class mismatch
  when exactly one of expected / actual is in that class).

ULP distance: every float of a binary format maps to an integer that is monotone in the value
(``ordered_int``): the bit pattern for sign 0 and minus its magnitude bits for sign 1, so that
+0 and -0 both map to 0 and adjacent floats differ by one (subnormals included).
"""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np

from pldr_ref.format_rounding import round_to_format

#: Supported backend dtypes by name -> (numpy dtype, unsigned integer view of the same width).
FLOAT_DTYPES: dict[str, tuple[np.dtype, np.dtype]] = {
    "float64": (np.dtype(np.float64), np.dtype(np.uint64)),
    "float32": (np.dtype(np.float32), np.dtype(np.uint32)),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), np.dtype(np.uint16)),
    "float16": (np.dtype(np.float16), np.dtype(np.uint16)),
}


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a backend dtype name (``float64``, ``float32``, ``bfloat16``, ``float16``)."""
    if name not in FLOAT_DTYPES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(FLOAT_DTYPES)}")
    return FLOAT_DTYPES[name][0]


def machine_epsilon(name: str) -> float:
    """eps = 2^(1 - p) of the dtype (distance from 1 to the next float)."""
    return float(ml_dtypes.finfo(numpy_dtype(name)).eps)


def ordered_int(x: np.ndarray, dtype: str) -> np.ndarray:
    """Monotone integer image of ``x`` (already in ``dtype``): adjacent floats differ by 1, +0 == -0 == 0.

    Returned as int64; for float64 the magnitude bits fit in 63 bits, so no overflow.
    """
    np_dtype, uint = FLOAT_DTYPES[dtype]
    bits = np.ascontiguousarray(np.asarray(x, dtype=np_dtype)).view(uint).astype(np.uint64)
    width = np_dtype.itemsize * 8
    sign = bits >> np.uint64(width - 1)
    magnitude = (bits & np.uint64((1 << (width - 1)) - 1)).astype(np.int64)
    return np.where(sign == 1, -magnitude, magnitude)


def ulp_distance(expected: np.ndarray, actual: np.ndarray, dtype: str) -> np.ndarray:
    """|ordered(actual) - ordered(expected rounded to dtype)| elementwise, as float64 counts.

    float64 distances can exceed 2^53; they are returned as float64 (exact below 2^53,
    correctly ordered above), which is all a report needs.
    """
    np_dtype = numpy_dtype(dtype)
    # the float64 golden values are rounded by pldr_ref's own rounding (one rounding, not ml_dtypes-version
    # dependent); the cast to the dtype is then exact.  Values beyond the dtype's range become inf.
    expected = np.asarray(expected, dtype=np.float64) if dtype == "float64" else round_to_format(expected, dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        e = ordered_int(expected.astype(np_dtype), dtype)
        a = ordered_int(np.asarray(actual).astype(np_dtype), dtype)
    hi = np.maximum(e, a)
    lo = np.minimum(e, a)
    # the true difference is below 2^64: unsigned wrap-around subtraction is exact
    return (hi.view(np.uint64) - lo.view(np.uint64)).astype(np.float64)


@dataclasses.dataclass(frozen=True)
class TensorComparison:
    """Error statistics of one output tensor (see module docstring); JSON-able via :meth:`to_dict`.

    ``atol``, ``rtol`` give the per-element allowance |a - e| <= atol + rtol |e| used to count
    ``mismatches`` (atol None: exact equality).  ``error`` is set instead of statistics when
    shapes differ.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    size: int
    max_abs: float
    median_abs: float
    max_rel: float
    median_rel: float
    max_ulp: float
    ref_max_abs: float
    worst_index: tuple[int, ...] | None
    worst_expected: float | None
    worst_actual: float | None
    nan_mismatches: int
    posinf_mismatches: int
    neginf_mismatches: int
    mismatches: int
    atol: float | None
    rtol: float
    error: str | None = None
    rms_rel: float = 0.0
    offset: float = 0.0
    gain: float = 0.0

    @property
    def class_mismatches(self) -> int:
        """NaN + (+inf) + (-inf) class mismatches."""
        return self.nan_mismatches + self.posinf_mismatches + self.neginf_mismatches

    @property
    def max_rel_normwise(self) -> float:
        """max|a - e| / max|e| over the finite entries (0 when both are 0); see :attr:`shown_rel_error`."""
        if self.ref_max_abs == 0.0:
            return 0.0 if self.max_abs == 0.0 else math.inf
        return self.max_abs / self.ref_max_abs

    @property
    def shown_rel_error(self) -> float:
        """:attr:`max_rel_normwise`, but NaN when the backend gave NaN where the golden value is not NaN and
        inf for an infinity class mismatch: what a report prints, so all-NaN outputs never read as 0."""
        if self.nan_mismatches:
            return math.nan
        if self.posinf_mismatches or self.neginf_mismatches:
            return math.inf
        return self.max_rel_normwise

    def to_dict(self) -> dict:
        """Plain dict with JSON-safe numbers (inf / nan as strings)."""
        out = dataclasses.asdict(self)
        out["shape"] = list(self.shape)
        out["worst_index"] = None if self.worst_index is None else list(self.worst_index)
        return {k: json_number(v) for k, v in out.items()}


def json_number(v: object) -> object:
    """Finite floats pass through; inf / -inf / nan become the strings "inf", "-inf", "nan"."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _class_mismatches(e: np.ndarray, a: np.ndarray) -> tuple[int, int, int]:
    nan = int(np.count_nonzero(np.isnan(e) != np.isnan(a)))
    pos = int(np.count_nonzero((e == np.inf) != (a == np.inf)))
    neg = int(np.count_nonzero((e == -np.inf) != (a == -np.inf)))
    return nan, pos, neg


def compare_tensor(
    name: str,
    expected: np.ndarray,
    actual: np.ndarray,
    dtype: str,
    atol: float | None = None,
    rtol: float = 0.0,
) -> TensorComparison:
    """Compare ``actual`` (backend, in ``dtype``) with ``expected`` (golden float64).

    Errors are computed in float64 on the values as given (``actual`` widened exactly).
    ``mismatches`` counts elements with |a - e| > atol + rtol |e| (a != e when ``atol`` is None)
    plus class mismatches; the worst index is that of the largest absolute error (first in C order).
    """
    numpy_dtype(dtype)
    e = np.asarray(expected, dtype=np.float64)
    a = np.asarray(actual)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"output {name!r} has non-numeric dtype {a.dtype}")
    a = a.astype(np.float64)
    if e.shape != a.shape:
        return TensorComparison(
            name, dtype, tuple(e.shape), int(e.size), math.inf, math.inf, math.inf, math.inf, math.inf,
            math.inf, None, None, None, 0, 0, 0, int(e.size), atol, rtol,
            error=f"shape {tuple(a.shape)} != expected {tuple(e.shape)}",
        )
    nan, pos, neg = _class_mismatches(e, a)
    finite = np.isfinite(e) & np.isfinite(a)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        abs_err = np.where(finite, np.abs(a - e), 0.0)
        rel_err = np.where(finite, abs_err / np.abs(e), 0.0)
    rel_err = np.where(finite & (abs_err == 0.0), 0.0, rel_err)  # 0/0 -> 0: exact agreement
    same_class = ~finite & ((np.isnan(e) & np.isnan(a)) | (e == a))
    ulps = ulp_distance(np.where(finite, e, 0.0), np.where(finite, a, 0.0), dtype)
    ref_abs = np.abs(e[np.isfinite(e)])
    if np.any(finite):
        fa, fr = abs_err[finite], rel_err[finite]
        with np.errstate(over="ignore"):
            max_abs, median_abs = float(fa.max()), float(np.median(fa))
        max_rel, median_rel = float(fr.max()), float(np.median(fr))
        max_ulp = float(ulps[finite].max())
    else:
        max_abs = median_abs = max_rel = median_rel = max_ulp = 0.0
    rms_rel, offset, gain = whole_tensor_errors(e, a)
    if atol is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            over = abs_err > atol + rtol * np.abs(np.where(finite, e, 0.0))
    else:
        over = finite & (a != e)
    mismatches = int(np.count_nonzero(over & finite)) + int(np.count_nonzero(~finite & ~same_class))
    worst = worst_e = worst_a = None
    if e.size:
        # the worst element: a class mismatch if any, else the largest absolute error
        badness = np.where(finite, abs_err, np.where(same_class, -1.0, np.inf))
        flat = int(np.argmax(badness))
        worst = tuple(int(i) for i in np.unravel_index(flat, e.shape))
        worst_e, worst_a = float(e.reshape(-1)[flat]), float(a.reshape(-1)[flat])
    return TensorComparison(
        name=name, dtype=dtype, shape=tuple(e.shape), size=int(e.size),
        max_abs=max_abs, median_abs=median_abs, max_rel=max_rel, median_rel=median_rel, max_ulp=max_ulp,
        ref_max_abs=float(ref_abs.max()) if ref_abs.size else 0.0,
        worst_index=worst, worst_expected=worst_e, worst_actual=worst_a,
        nan_mismatches=nan, posinf_mismatches=pos, neginf_mismatches=neg,
        mismatches=mismatches, atol=atol, rtol=rtol, rms_rel=rms_rel, offset=offset, gain=gain,
    )


def whole_tensor_errors(expected: np.ndarray, actual: np.ndarray) -> tuple[float, float, float]:
    """(relative RMS error ||d|| / ||e||, offset mean(d) / rms(e), gain <d, e> / <e, e>) of d = actual - expected
    over the entries where ``expected`` is finite; NaN if ``actual`` is non-finite there; (0, 0, 0) when
    both are zero, inf when only ``expected`` is zero."""
    fin = np.isfinite(expected)
    e, a = expected[fin], actual[fin]
    if not np.all(np.isfinite(a)):
        return math.nan, math.nan, math.nan
    if e.size == 0:
        return 0.0, 0.0, 0.0
    scale = float(np.max(np.abs(e)))
    with np.errstate(over="ignore", invalid="ignore"):
        if scale > 0:  # scaled: no overflow in the sums of squares
            e, a = e / scale, a / scale
        d = a - e
        ee = float(np.dot(e, e))
        dd = float(np.dot(d, d))
        if ee == 0.0:
            return (0.0, 0.0, 0.0) if dd == 0.0 else (math.inf, math.inf, math.inf)
        return math.sqrt(dd / ee), float(np.mean(d)) / math.sqrt(ee / e.size), float(np.dot(d, e)) / ee
