"""Run profiles ``ci`` and ``thorough``: hypothesis settings, seeds and the per-run record of every check.

The settings live here (not in ``tests/conftest.py``) so that ``pldr-ref prove`` behaves the same from the
command line and under pytest.  Both profiles use explicit seeds (``hypothesis.seed``, derived from the
property's name, never from the checkout path) and ``database=None``: ``ci`` runs 25 examples per property,
``thorough`` 1000 with another seed.  Negative controls search for a counterexample with shrinking disabled.

:func:`run_property` counts the examples that reached the operator (the tracer saw a call into the check's
operators during the example) and :func:`record_ratio` keeps the largest observed value / bound of an
inequality; both go to the :class:`RunRecord` of the check being run.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st

from proofs_check import tracing

#: Run profiles.
PROFILES = ("ci", "thorough")

_EXAMPLES = {"ci": 25, "thorough": 1000}
# a negative control must find its counterexample reliably even in the ci profile
_CONTROL_EXAMPLES = {"ci": 200, "thorough": 1000}
#: Offset added to the per-property seed in the thorough profile (other examples than ci, still reproducible).
THOROUGH_SEED_OFFSET = 1_000_003
#: A check fails when fewer than this fraction of its example budget reached its operator.
MIN_REACHED_FRACTION = 0.9


class NegativeControlError(AssertionError):
    """A negative control found no violation although a hypothesis of the theorem was dropped."""


@dataclasses.dataclass
class RunRecord:
    """What one check's positive run measured: example budget, examples that reached the operator, and the
    largest observed ratio value / bound of its inequalities (None when it states none)."""

    budget: int = 0
    valid: int = 0
    reached: int = 0
    ratio: float | None = None
    #: smallest observed value / natural scale of a positivity or nonnegativity statement (None: none stated)
    margin: float | None = None


_RECORDS: list[RunRecord] = []


def current_record() -> RunRecord | None:
    """The record of the check being run (None outside :func:`recording`)."""
    return _RECORDS[-1] if _RECORDS else None


class recording:  # noqa: N801 (a context manager used like a function)
    """``with recording() as rec:`` collects :func:`run_property` counts and :func:`record_ratio` values."""

    def __enter__(self) -> RunRecord:
        self.record = RunRecord()
        _RECORDS.append(self.record)
        return self.record

    def __exit__(self, *exc: object) -> None:
        _RECORDS.pop()


_NO_SHRINK: list[bool] = []


class no_shrinking:  # noqa: N801 (a context manager used like a function)
    """Inside the block positive properties stop at their first failure (the mutation run needs the verdict,
    not a minimal counterexample)."""

    def __enter__(self) -> None:
        _NO_SHRINK.append(True)

    def __exit__(self, *exc: object) -> None:
        _NO_SHRINK.pop()


def record_ratio(observed: float, bound: float = 1.0) -> None:
    """Keep observed / bound of an inequality if it is the largest seen in the current check (bound <= 0 and
    NaN are ignored: no sharpness information)."""
    rec = current_record()
    value = float(observed) / float(bound) if bound > 0 else float("nan")
    if rec is not None and value == value:
        rec.ratio = value if rec.ratio is None else max(rec.ratio, value)


def record_lower(lhs: float, rhs: float) -> None:
    """Sharpness of a lower bound ``lhs >= rhs``: keep rhs / lhs (1 = tight, smaller = the search stayed away
    from the bound) if it is the largest seen in the current check (lhs <= 0 and NaN carry no information)."""
    record_ratio(rhs, lhs)


def record_margin(value: float, scale: float = 1.0) -> None:
    """Sharpness of a positivity / nonnegativity statement ``value > 0`` (``>= 0``): keep value / scale (how
    close the search came to the boundary 0, relative to the natural scale of the quantity) if it is the
    smallest seen in the current check (scale <= 0 and NaN are ignored)."""
    rec = current_record()
    value = float(value) / float(scale) if scale > 0 else float("nan")
    if rec is not None and value == value:
        rec.margin = value if rec.margin is None else min(rec.margin, value)


def check_profile(profile: str) -> str:
    """Validate and return ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    return profile


def property_seed(profile: str, test: Callable[..., Any]) -> int:
    """Seed of a property: crc32 of its qualified name (path independent), offset in the thorough profile."""
    base = zlib.crc32(f"{test.__module__}.{test.__qualname__}".encode())
    return base + (THOROUGH_SEED_OFFSET if profile == "thorough" else 0)


def property_settings(profile: str, negative: bool = False) -> settings:
    """The hypothesis ``settings`` of ``profile`` (negative controls: more examples, no shrinking, quiet)."""
    check_profile(profile)
    common: dict[str, Any] = dict(
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
    )
    if negative:
        return settings(
            max_examples=_CONTROL_EXAMPLES[profile],
            phases=(Phase.explicit, Phase.generate),
            verbosity=Verbosity.quiet,
            **common,
        )
    if _NO_SHRINK:
        return settings(max_examples=_EXAMPLES[profile], phases=(Phase.explicit, Phase.generate),
                        verbosity=Verbosity.quiet, **common)
    return settings(max_examples=_EXAMPLES[profile], **common)


def trials(profile: str, ci: int = 25, thorough: int = 1000) -> int:
    """Number of seeded random trials for a non-hypothesis loop (Monte Carlo, real-data sweeps)."""
    return ci if check_profile(profile) == "ci" else thorough


def run_property(profile: str, test: Callable[..., None], *strategies: st.SearchStrategy) -> str:
    """Run ``test`` as a seeded hypothesis property under ``profile``; an AssertionError propagates.

    Examples rejected with ``hypothesis.assume`` do not count; the detail reports how many of the budget
    reached the operator (the tracer saw a call into the check's operators during the example).
    """
    budget = _EXAMPLES[check_profile(profile)]
    counts = {"valid": 0, "reached": 0}
    with tracing.ensure_tracer() as tracer:

        @functools.wraps(test)
        def counted(*args: Any, **kwargs: Any) -> None:
            before = tracer.hits
            test(*args, **kwargs)
            counts["valid"] += 1
            counts["reached"] += tracer.hits > before

        property_settings(profile)(seed(property_seed(profile, test))(given(*strategies)(counted)))()
    rec = current_record()
    if rec is not None:
        rec.budget += budget
        rec.valid += counts["valid"]
        rec.reached += counts["reached"]
    return f"{counts['reached']}/{budget} examples reached the operator"


def expect_counterexample(profile: str, test: Callable[..., None], *strategies: st.SearchStrategy) -> str:
    """Run ``test`` (a property with a hypothesis dropped) and return the violation it must find.

    Raises :class:`NegativeControlError` when every example satisfied the conclusion.
    """
    try:
        property_settings(profile, negative=True)(seed(property_seed(profile, test))(given(*strategies)(test)))()
    except AssertionError as exc:
        if isinstance(exc, NegativeControlError):
            raise
        return "violated: " + (str(exc).splitlines() or ["assertion failed"])[0][:200]
    raise NegativeControlError(f"no counterexample in {_CONTROL_EXAMPLES[profile]} examples")


def expect_violation(violated: bool, message: str) -> str:
    """Return ``message`` when the deterministic negative control observed the violation, else raise."""
    if not violated:
        raise NegativeControlError(f"expected a violation but the conclusion held: {message}")
    return "violated: " + message
