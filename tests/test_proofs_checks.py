"""Every registered check passes on the real pldr_ref operators and its negative control observes the expected
violation; the runner itself reports a broken check and a toothless control."""

from __future__ import annotations

import os

import pytest

from proofs_check.profiles import NegativeControlError, expect_counterexample, expect_violation
from proofs_check.registry import Check, all_checks, run_check

# HYPOTHESIS_PROFILE=thorough (the tests/conftest.py switch) also selects the thorough proofs_check profile
PROFILE = "thorough" if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else "ci"
CHECKS = all_checks()


@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
def test_check_passes(check):
    detail = check.run(PROFILE)
    assert isinstance(detail, str)


@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
def test_negative_control_observes_violation(check):
    observed = check.negative_control(PROFILE)
    assert observed.startswith("violated")


def _noop(profile: str) -> str:
    """noop"""
    return "ok"


def _failing(profile: str) -> str:
    """always fails"""
    raise AssertionError("conclusion violated")


def test_runner_reports_failure_and_toothless_control():
    bad = Check("bad", (), "p", "theorem", ("sympy",), ("f",), _failing, _noop, "s", "d")
    outcome = run_check(bad, "ci")
    assert outcome.status == "fail" and not outcome.ok

    def toothless(profile: str) -> str:
        return expect_violation(False, "nothing broke")

    weak = Check("weak", (), "p", "theorem", ("sympy",), ("f",), _noop, toothless, "s", "d")
    outcome = run_check(weak, "ci")
    assert outcome.status == "pass" and outcome.control_status == "held" and not outcome.ok


def test_expect_counterexample_raises_when_property_holds():
    from hypothesis import strategies as st

    def always_true(x: int) -> None:
        assert x == x

    with pytest.raises(NegativeControlError):
        expect_counterexample("ci", always_true, st.integers())


def test_unknown_profile_is_rejected():
    with pytest.raises(ValueError, match="profile"):
        CHECKS[0].run("fast")
