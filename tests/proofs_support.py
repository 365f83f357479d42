"""One ci-profile run of the whole proofs_check registry per test session, shared by the proofs_check tests
(the run is the expensive part: every mirror, traced, with its negative control)."""

from __future__ import annotations

import functools
import os

from proofs_check.registry import Outcome, all_checks
from proofs_check.report import run_all

# HYPOTHESIS_PROFILE=thorough (the tests/conftest.py switch) also selects the thorough proofs_check profile
PROFILE = "thorough" if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else "ci"


def registry_outcomes(profile: str = PROFILE) -> tuple[Outcome, ...]:
    """Every check run once (with its control) under ``profile``.

    The cache is keyed on the profile name itself: ``registry_outcomes()`` and ``registry_outcomes("ci")`` share
    one run (an ``lru_cache`` on this function would key them apart and run the registry twice).
    """
    return _outcomes(profile)


@functools.lru_cache(maxsize=2)
def _outcomes(profile: str) -> tuple[Outcome, ...]:
    return tuple(run_all(all_checks(), profile))


_FIELDS = ("name", "lean", "paper", "label", "method", "exercises", "run", "negative_control", "slack", "dropped")


def make_check(*args: object, **kwargs: object):
    """A :class:`proofs_check.registry.Check` from the first ten fields given in order (test shorthand)."""
    from proofs_check.registry import Check

    return Check(**dict(zip(_FIELDS, args, strict=False)), **kwargs)
