"""The precision guard: accept a result only if it is the same float64 at ``dps`` and ``2 * dps``.

If every value rounds to the same binary64 number at both precisions, the working precision
was enough for correct rounding (barring a value within 10^-2dps of a rounding boundary at
both precisions, which the doubling makes vanishingly unlikely).  Otherwise the first stage
(in forward order) that differs is reported.

The doubling can only see errors that shrink with the precision.  An error that is the same at
``dps`` and ``2 * dps`` - a sum that loses every bit of a small term at both precisions, and a
cancellation that then leaves nothing - passes it.  The engine therefore never rounds where that
can happen: masked logits score + mask_value / finfo.min and the softmax shift x - max are formed
exactly (:func:`pldr_ref.exact.ops.masked_logit`, :func:`pldr_ref.exact.ops.softmax_row`), so every
rounding error left scales with 10^-dps and shrinks at ``2 * dps``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from pldr_ref.exact.numbers import ulp_distance


class PrecisionError(ArithmeticError):
    """The exact tier's result at ``dps`` and at ``2 * dps`` rounds to different float64 values."""

    def __init__(self, stage: str, dps: int, mismatches: int, index: tuple[int, ...], low: float, high: float):
        self.stage, self.dps, self.mismatches, self.index, self.low, self.high = (
            stage, dps, mismatches, index, low, high)
        super().__init__(
            f"stage {stage!r}: {mismatches} value(s) differ between dps={dps} and dps={2 * dps} after rounding "
            f"to float64 (first at index {index}: {low!r} vs {high!r}); increase dps"
        )


def first_mismatch(low: Mapping[str, np.ndarray], high: Mapping[str, np.ndarray], dps: int) -> PrecisionError | None:
    """The :class:`PrecisionError` for the first stage whose bits differ, or None when all agree."""
    for name, a in low.items():
        b = high[name]
        if a.shape != b.shape:
            raise ValueError(f"stage {name!r} has shape {a.shape} at dps={dps} but {b.shape} at dps={2 * dps}")
        bad = ulp_distance(a, b) > 0
        bad |= np.isnan(a) != np.isnan(b)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return PrecisionError(name, dps, int(bad.sum()), idx, float(a[idx]), float(b[idx]))
    return None


def guarded(compute: Callable[[int], dict[str, np.ndarray]], dps: int) -> dict[str, np.ndarray]:
    """Run ``compute(dps)`` and ``compute(2 * dps)``; return the first if they agree bit for bit, else raise."""
    if not isinstance(dps, int) or isinstance(dps, bool) or dps < 1:
        raise ValueError(f"dps must be a positive int, got {dps!r}")
    low = compute(dps)
    high = compute(2 * dps)
    err = first_mismatch(low, high, dps)
    if err is not None:
        raise err
    return low
