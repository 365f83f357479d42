"""silu, the FFN and metric-learner gate: z * expit(z) against mpmath, its limits and its edge inputs."""

from __future__ import annotations

import warnings

import mpmath
import numpy as np
import pytest

from pldr_ref.activations import silu


def _exact(z: np.ndarray) -> np.ndarray:
    with mpmath.workprec(120):
        return np.array([float(mpmath.mpf(t) / (1 + mpmath.exp(-mpmath.mpf(t)))) for t in z])


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.spacing(np.abs(want))


def test_silu_is_within_two_ulp_of_mpmath() -> None:
    z = np.random.default_rng(0).standard_normal(3000) * 6
    z = np.concatenate([z, [-709.5, -40.0, -1e-300, 1e-300, 40.0]])
    assert _ulps(silu(z), _exact(z)).max() <= 2.0
    # below z = -709.78, expit's exp(-z) overflows: -0.0 where the true value is a subnormal below 1e-305
    assert np.array_equal(silu(np.array([-709.79, -745.0])), [-0.0, -0.0])
    assert np.all(np.abs(_exact(np.array([-709.79, -745.0]))) < 1e-305)


def test_negative_control_a_sign_slip_is_far_off() -> None:
    z = np.random.default_rng(1).standard_normal(200) * 6
    broken = z / (1 + np.exp(z))
    assert _ulps(broken, _exact(z)).max() > 1e6


def test_silu_limits_and_edge_inputs() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # expit's exp(-z) = inf for z < -709.78 is the intended limit, silently
        out = silu(np.array([-800.0, -0.0, 0.0, 800.0, np.inf]))
    assert np.array_equal(out, [-0.0, -0.0, 0.0, 800.0, np.inf])
    assert np.signbit(out[0]) and np.signbit(out[1]) and not np.signbit(out[2])
    with np.errstate(invalid="ignore"):
        assert np.isnan(silu(np.array([-np.inf, np.nan]))).all()  # -inf * 0, as torch gives NaN too
    zero_d = silu(np.array(2.0))
    assert isinstance(zero_d, np.ndarray) and zero_d.shape == ()
    assert float(silu(3.0)) == pytest.approx(3.0 / (1 + np.exp(-3.0)), rel=1e-15)
