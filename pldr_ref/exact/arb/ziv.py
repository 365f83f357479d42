"""Ziv's strategy over ball computations: certify each output's float64 rounding, else raise the precision.

A computation is a function ``compute(prec, final)`` yielding ``(name, balls, nonneg, tainted)``
stage by stage, in forward order (``nonneg``: the values are known to be >= 0; ``tainted``: an
undecided binary32 rounding upstream, on the final attempt, makes the whole stage uncertified).
:func:`certify` runs it at ``prec`` bits and rounds every stage as it arrives
(:func:`~pldr_ref.exact.arb.balls.round_balls`).  The first stage with an undecided ball
stops the attempt early (later stages would not be certified either at this precision), as does a
:class:`~pldr_ref.exact.arb.stages.NeedPrecisionError` raised by the computation itself, and the
computation is restarted at a higher precision chosen from the accuracy lost so far
(:func:`next_precision`).  At ``max_prec`` the last attempt runs to the end (``final=True``) and
reports every undecided value as *uncertified*: a value whose ball still straddles a rounding
boundary, e.g. an exact real that sits on a boundary but is computed with a non-zero radius.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator

import numpy as np

from pldr_ref.exact.arb.balls import accuracy_bits, outward_bounds, round_balls, working_precision
from pldr_ref.exact.arb.stages import NeedPrecisionError

#: Default first working precision (bits) of an op-level computation.
DEFAULT_PREC = 128
#: Default largest working precision (bits): beyond it, undecided values are reported as uncertified.
DEFAULT_MAX_PREC = 4096
#: Bits beyond binary64's 53 that a projected precision keeps in reserve.
PROJECTION_MARGIN = 64
#: Precisions are rounded up to a multiple of this many bits.
PREC_STEP = 64

Stages = Iterator[tuple[str, np.ndarray, bool, bool]]
Compute = Callable[[int, bool], Stages]


@dataclasses.dataclass
class Attempt:
    """One run of the computation: its precision, where it stopped (None if it finished), and its time."""

    prec: int
    stopped_at: str | None
    seconds: float


@dataclasses.dataclass
class Certified:
    """Result of :func:`certify`.

    ``values``: stage name -> float64 array (correctly rounded where certified); ``certified``:
    stage name -> bool array; ``accuracy``: stage name -> normwise accuracy bits of its balls at the
    final precision; ``attempts``: the precisions tried.

    ``balls``: the enclosures themselves, stage name -> NumPy ``object`` array (same shape as the
    values) of ``flint.arb`` balls [midpoint +- radius] of the accepted attempt, each provably
    containing the exact real value (``ball.mid()``, ``ball.rad()``, ``ball.lower()``, ``ball.upper()``
    are exact ``arb`` numbers); empty when the computation was run with ``keep_balls=False``.
    :meth:`enclosure` gives them as float64 bounds.
    """

    values: dict[str, np.ndarray]
    certified: dict[str, np.ndarray]
    accuracy: dict[str, float]
    attempts: list[Attempt]
    balls: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def enclosure(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) float64 arrays of stage ``name``: each ball's lower end rounded down and upper end
        rounded up, so lower <= exact value <= upper (+-inf for a ball that is not finite or beyond float64).

        ``KeyError`` names the stage when the balls were not kept (``keep_balls=False``) or it does not exist.
        """
        if name not in self.balls:
            why = "no balls were kept (keep_balls=False)" if not self.balls else f"stages: {sorted(self.balls)}"
            raise KeyError(f"no enclosure for stage {name!r}: {why}")
        return outward_bounds(self.balls[name])

    @property
    def prec(self) -> int:
        """The working precision of the accepted attempt."""
        return self.attempts[-1].prec

    @property
    def all_certified(self) -> bool:
        """True when every value of every stage is certified correctly rounded."""
        return all(bool(c.all()) for c in self.certified.values())

    def counts(self) -> tuple[int, int]:
        """(certified values, all values)."""
        return (sum(int(c.sum()) for c in self.certified.values()), sum(int(c.size) for c in self.certified.values()))

    def uncertified(self) -> dict[str, int]:
        """Stage name -> number of uncertified values (stages with none are omitted)."""
        return {k: int((~c).sum()) for k, c in self.certified.items() if not c.all()}


def next_precision(prec: int, lost_bits: float, done: int, total: int, max_prec: int) -> int:
    """The next working precision after an attempt at ``prec`` stopped at stage ``done`` of ``total``.

    ``lost_bits`` = prec - (normwise accuracy of the failing stage): extrapolated linearly to all
    ``total`` stages, plus 53 + :data:`PROJECTION_MARGIN` bits; at least 1.5 ``prec``, at most
    ``max_prec``, rounded up to :data:`PREC_STEP`.
    """
    lost = max(0.0, lost_bits) if math.isfinite(lost_bits) else float(prec)
    projected = lost * total / max(done, 1) + 53 + PROJECTION_MARGIN
    want = max(math.ceil(1.5 * prec), math.ceil(projected))
    want = -(-want // PREC_STEP) * PREC_STEP
    return min(want, max_prec)


def certify(compute: Compute, *, prec: int = DEFAULT_PREC, max_prec: int = DEFAULT_MAX_PREC,
            total_stages: int | None = None, on_stage: Callable[[str], None] | None = None,
            keep_balls: bool = True) -> Certified:
    """Run ``compute`` under Ziv's strategy from ``prec`` up to ``max_prec`` bits (see the module docstring).

    ``total_stages`` (for the precision projection) defaults to the stage count of the last attempt;
    ``on_stage(name)`` is called after each stage of each attempt (progress display); ``keep_balls``
    keeps the accepted attempt's balls on :attr:`Certified.balls` (False saves their memory).
    """
    if isinstance(prec, bool) or not isinstance(prec, int) or prec < 2:
        raise ValueError(f"prec must be an int >= 2, got {prec!r}")
    if isinstance(max_prec, bool) or not isinstance(max_prec, int) or max_prec < prec:
        raise ValueError(f"max_prec must be an int >= prec={prec}, got {max_prec!r}")
    attempts: list[Attempt] = []
    seen_total = total_stages
    while True:
        final = prec >= max_prec
        values: dict[str, np.ndarray] = {}
        certified: dict[str, np.ndarray] = {}
        accuracy: dict[str, float] = {}
        kept: dict[str, np.ndarray] = {}
        start = time.monotonic()
        stopped: str | None = None
        suggested: int | None = None
        lost = math.inf
        with working_precision(prec):
            stages = compute(prec, final)
            try:
                for name, bl, nonneg, tainted in stages:
                    vals, ok = round_balls(bl, nonneg=nonneg)
                    if tainted:
                        ok[...] = False
                    acc = accuracy_bits(bl)
                    values[name], certified[name], accuracy[name] = vals, ok, acc
                    if keep_balls:
                        kept[name] = bl
                    if on_stage is not None:
                        on_stage(name)
                    if not final and not ok.all():
                        stopped, lost = name, prec - acc
                        break
            except NeedPrecisionError as exc:
                if final:
                    raise
                stopped = f"({exc})"
                lost = prec - min(accuracy.values(), default=0.0)
                suggested = exc.suggested_prec
            finally:
                stages.close()
        attempts.append(Attempt(prec, stopped, time.monotonic() - start))
        if stopped is None:
            return Certified(values, certified, accuracy, attempts, kept)
        done = len(values)
        total = seen_total if seen_total is not None else max(done, 1)
        if suggested is not None:  # the computation projected its own need: trust it (at least one step up)
            prec = min(max(-(-suggested // PREC_STEP) * PREC_STEP, prec + PREC_STEP), max_prec)
        else:
            prec = next_precision(prec, lost, done, total, max_prec)
