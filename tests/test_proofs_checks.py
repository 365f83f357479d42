"""Every registered check passes on the real pldr_ref operators, calls the operators it declares (measured by
tracing), lets at least 90 % of its examples reach them, and its negative control observes the violation; the
runner itself reports a broken check, a toothless control, an undeclared operator and skipped examples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from proofs_support import PROFILE, make_check, registry_outcomes

from proofs_check.profiles import (
    NegativeControlError,
    expect_counterexample,
    expect_violation,
    property_seed,
    run_property,
)
from proofs_check.registry import all_checks, run_check

CHECKS = all_checks()


@pytest.mark.parametrize("index", range(len(CHECKS)), ids=[c.name for c in CHECKS])
def test_check_is_ok_on_the_real_operators(index):
    outcome = registry_outcomes()[index]
    assert outcome.check.name == CHECKS[index].name
    assert outcome.ok, outcome.reason
    assert set(outcome.check.exercises) <= set(outcome.measured), "a declared operator was not called"
    if outcome.check.exercises and outcome.budget:
        assert outcome.reached >= 0.9 * outcome.budget


def _noop(profile: str) -> str:
    """noop"""
    return "ok"


def _failing(profile: str) -> str:
    """always fails"""
    raise AssertionError("conclusion violated")


def test_runner_reports_failure_and_toothless_control():
    bad = make_check("bad", (), "p", "theorem", ("sympy",), (), _failing, _noop, "s", "d")
    outcome = run_check(bad, "ci")
    assert outcome.status == "fail" and not outcome.ok and "conclusion violated" in outcome.reason

    def toothless(profile: str) -> str:
        return expect_violation(False, "nothing broke")

    weak = make_check("weak", (), "p", "theorem", ("sympy",), (), _noop, toothless, "s", "d")
    outcome = run_check(weak, "ci")
    assert outcome.status == "pass" and outcome.control_status == "held" and not outcome.ok


def test_skipped_control_is_not_ok():
    check = make_check("x", (), "p", "theorem", ("sympy",), (), _noop, _noop, "s", "d")
    outcome = run_check(check, "ci", controls=False)
    assert outcome.passed and outcome.control_status == "skipped" and not outcome.ok


def test_declared_operator_must_be_called():
    claims = make_check("claims", (), "p", "theorem", ("sympy",), ("pldr_ref.norms.layer_norm",), _noop, _noop, "s",
                        "d")
    outcome = run_check(claims, "ci")
    assert outcome.status == "fail" and "never called" in outcome.detail


def test_examples_that_skip_the_operator_fail_the_check():
    from pldr_ref.norms import layer_norm

    def run(profile: str) -> str:
        def prop(x: float) -> None:
            if x > 0:  # an early return: most examples never reach the operator
                return
            layer_norm(np.array([x, 1.0]), np.ones(2), np.zeros(2))

        return run_property(profile, prop, st.floats(0.5, 1.0) | st.just(-1.0))

    check = make_check("skips", (), "p", "theorem", ("sympy",), ("pldr_ref.norms.layer_norm",), run, _noop, "s", "d")
    outcome = run_check(check, "ci")
    assert outcome.status == "fail" and "reached the operator" in outcome.detail, outcome.detail


def test_expect_counterexample_raises_when_property_holds():
    def always_true(x: int) -> None:
        assert x == x

    with pytest.raises(NegativeControlError):
        expect_counterexample("ci", always_true, st.integers())


def test_seeds_depend_on_the_property_name_only():
    """Issue 10: hypothesis' derandomized examples changed with the checkout path; the seed is a crc32 of the
    property's qualified name (never of a file path), different in the thorough profile."""
    import zlib

    def prop(x: int) -> None:
        """a property"""

    name = f"{prop.__module__}.{prop.__qualname__}".encode()
    assert property_seed("ci", prop) == zlib.crc32(name)
    assert property_seed("thorough", prop) != property_seed("ci", prop)


def test_unknown_profile_is_rejected():
    with pytest.raises(ValueError, match="profile"):
        CHECKS[0].run("fast")


def test_profile_of_this_run_is_known():
    assert PROFILE in ("ci", "thorough")
