"""Run profiles ``ci`` and ``thorough``: hypothesis settings and trial counts used inside every check.

The settings objects live here (not in ``tests/conftest.py``) so that ``pldr-ref prove`` behaves the
same from the command line and under pytest.  ``ci``: derandomized, 25 examples per property;
``thorough``: randomized, 1000 examples per property.  Negative controls search for a counterexample
with shrinking disabled (the failure is the point, its minimal form is not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st

from proofs_check.registry import PROFILES

_EXAMPLES = {"ci": 25, "thorough": 1000}
# a negative control must find its counterexample reliably even in the ci profile
_CONTROL_EXAMPLES = {"ci": 200, "thorough": 1000}


class NegativeControlError(AssertionError):
    """A negative control found no violation although a hypothesis of the theorem was dropped."""


def check_profile(profile: str) -> str:
    """Validate and return ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    return profile


def property_settings(profile: str, negative: bool = False) -> settings:
    """The hypothesis ``settings`` of ``profile`` (negative controls: more examples, no shrinking, quiet)."""
    check_profile(profile)
    common: dict[str, Any] = dict(
        deadline=None,
        database=None,
        derandomize=profile == "ci",
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
    return settings(max_examples=_EXAMPLES[profile], **common)


def trials(profile: str, ci: int = 25, thorough: int = 1000) -> int:
    """Number of seeded random trials for a non-hypothesis loop (Monte Carlo, real-data sweeps)."""
    return ci if check_profile(profile) == "ci" else thorough


def run_property(profile: str, test: Callable[..., None], *strategies: st.SearchStrategy) -> str:
    """Run ``test`` as a hypothesis property under ``profile``; an AssertionError propagates."""
    property_settings(profile)(given(*strategies)(test))()
    return f"{_EXAMPLES[profile]} examples"


def expect_counterexample(profile: str, test: Callable[..., None], *strategies: st.SearchStrategy) -> str:
    """Run ``test`` (a property with a hypothesis dropped) and return the violation it must find.

    Raises :class:`NegativeControlError` when every example satisfied the conclusion.
    """
    try:
        property_settings(profile, negative=True)(given(*strategies)(test))()
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
