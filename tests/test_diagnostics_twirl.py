"""``pldr_ref.diagnostics.twirl`` pinned against independent derivations: mpmath at 50 digits (frequencies,
C_Theta, every multiplier statistic) and sympy closed forms (C_Theta from the slowest planes, the geometric
orbit sum), for d_k in {8, 64, 128} and two RoPE bases; each check with a negative control."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import sympy

from pldr_ref.diagnostics.twirl import c_theta, difference_frequencies, twirl_multiplier, twirl_table

MP_DPS = 50
D_KS = (8, 64, 128)
BASES = (10000.0, 500000.0)
SEQ_LENS = (64, 256, 1024)
#: float64 evaluation of sin(S w / 2) with S <= 1024 and |w| <= 2: relative error well below 1e-10.
RTOL = 1e-10


def mp_frequencies(d_k: int, base: float) -> list:
    """The multiset in mpmath at 50 digits (same order as the code: in-plane, |differences|, sums)."""
    with mpmath.workdps(MP_DPS):
        th = [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * a) / d_k) for a in range(d_k // 2)]
        pairs = [(a, b) for a in range(d_k // 2) for b in range(d_k // 2) if a != b]
        return [2 * t for t in th] + [abs(th[a] - th[b]) for a, b in pairs] + [th[a] + th[b] for a, b in pairs]


def mp_table(d_k: int, base: float) -> dict:
    with mpmath.workdps(MP_DPS):
        w = mp_frequencies(d_k, base)
        ct = max(1 / abs(mpmath.sin(x / 2)) for x in w)
        out = {"C_theta": ct}
        slow = 2 * mpmath.power(mpmath.mpf(base), -mpmath.mpf(d_k - 2) / d_k)
        for s in SEQ_LENS:
            m = sorted(abs(mpmath.sin(s * x / 2)) / (s * abs(mpmath.sin(x / 2))) for x in w)
            n = len(m)
            med = m[n // 2] if n % 2 else (m[n // 2 - 1] + m[n // 2]) / 2
            # no multiplier sits within 1e-9 of a threshold, so the float64 fractions must match exactly
            assert all(abs(v - t) > 1e-9 for v in m for t in (mpmath.mpf("0.1"), mpmath.mpf("0.01")))
            out[s] = {
                "worst": m[-1], "median": med,
                "frac_lt_0_1": sum(v < mpmath.mpf("0.1") for v in m) / n,
                "frac_lt_0_01": sum(v < mpmath.mpf("0.01") for v in m) / n,
                "slowest_in_plane": abs(mpmath.sin(s * slow / 2)) / (s * abs(mpmath.sin(slow / 2))),
                "uniform_bound": ct / s,
            }
        return out


def close(got: float, want, rtol: float = RTOL) -> bool:
    return abs(mpmath.mpf(got) - want) <= rtol * abs(want)


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("d_k", [pytest.param(d, marks=pytest.mark.slow) if d > 64 else d for d in D_KS])
def test_table_matches_mpmath_at_50_digits(d_k: int, base: float) -> None:
    got = twirl_table(d_k, base, SEQ_LENS)
    want = mp_table(d_k, base)
    assert got["n_frequencies"] == d_k // 2 + d_k * (d_k // 2 - 1)
    assert close(got["C_theta"], want["C_theta"])
    for s in SEQ_LENS:
        row, ref = got["by_seq_len"][str(s)], want[s]
        for key in ("worst", "median", "slowest_in_plane", "uniform_bound"):
            assert close(row[key], ref[key]), (d_k, base, s, key, row[key], ref[key])
        for key in ("frac_lt_0_1", "frac_lt_0_01"):
            assert row[key] == float(ref[key]), (d_k, base, s, key)


def test_table_negative_control_other_base_is_caught() -> None:
    """The same comparison rejects a table of a slightly different base (10001 for 10000)."""
    got = twirl_table(64, 10001.0, SEQ_LENS)
    want = mp_table(64, 10000.0)
    assert not close(got["C_theta"], want["C_theta"])


def test_frequency_multiset_has_duplicates_kept_and_matches_mpmath() -> None:
    w = difference_frequencies(64, 10000.0)
    assert w.size == 2016
    ref = mp_frequencies(64, 10000.0)
    assert max(abs(mpmath.mpf(float(a)) - b) / b for a, b in zip(w, ref, strict=True)) < 1e-14
    # |theta_a - theta_b| and |theta_b - theta_a| are both present: every difference occurs (at least) twice
    assert np.unique(w).size < w.size
    # negative control: dropping duplicates changes the count the issue fixes at 2016
    assert np.unique(w).size != 2016


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("d_k", D_KS)
def test_c_theta_closed_form_from_the_slowest_planes(d_k: int, base: float) -> None:
    """Every frequency is in (0, 2], where sin(w/2) increases, so C_Theta = 1/sin(w_min/2) with
    w_min = theta_last * min(2, r - 1), theta_last = base^(-(d_k-2)/d_k), r = base^(2/d_k) (the in-plane
    2 theta_last or the adjacent difference theta_{n-2} - theta_{n-1}); exact in sympy, evaluated to 50 digits."""
    b = sympy.Rational(str(int(base)))
    th_last = b ** sympy.Rational(-(d_k - 2), d_k)
    r = b ** sympy.Rational(2, d_k)
    w_min = th_last * sympy.Min(2, r - 1)
    closed = sympy.N(1 / sympy.sin(w_min / 2), MP_DPS)
    assert close(c_theta(difference_frequencies(d_k, base)), mpmath.mpf(str(closed)))
    # negative control: the in-plane frequency alone is the wrong minimiser at d_k = 64 (r - 1 < 2)
    if d_k == 64:
        wrong = sympy.N(1 / sympy.sin(th_last), MP_DPS)
        assert not close(c_theta(difference_frequencies(d_k, base)), mpmath.mpf(str(wrong)))


def test_multiplier_is_the_modulus_of_the_geometric_orbit_sum() -> None:
    """m(w, S) = |(1/S) sum_{n=1..S} e^{i w n}|, the direct sum evaluated in mpmath at 50 digits; the
    full-angle variant |sin(S w/2)| / (S |sin w|) is rejected by the same comparison."""
    rng = np.random.Generator(np.random.PCG64(3))
    for omega, length in zip(rng.uniform(1e-3, 2.0, 20), rng.integers(1, 400, 20), strict=True):
        with mpmath.workdps(MP_DPS):
            direct = abs(mpmath.fsum(mpmath.expj(mpmath.mpf(float(omega)) * k) for k in range(1, int(length) + 1)))
            want = direct / int(length)
        got = twirl_multiplier(np.array([omega]), int(length))[0]
        assert abs(got - want) <= 1e-12 * (1 + want)
        full = abs(np.sin(length * omega / 2)) / (length * abs(np.sin(omega)))  # broken: full angle
        if abs(full - float(want)) > 1e-6:
            assert abs(full - want) > 1e-12 * (1 + want)


def test_multiplier_properties_and_bad_input() -> None:
    w = difference_frequencies(64, 10000.0)
    assert np.allclose(twirl_multiplier(w, 1), 1.0, rtol=1e-14, atol=0)
    for s in SEQ_LENS:
        m = twirl_multiplier(w, s)
        assert np.all(m <= np.minimum(1.0, 1.0 / (s * np.abs(np.sin(w / 2)))) * (1 + 1e-12))
    with pytest.raises(ValueError, match="seq_len"):
        twirl_multiplier(w, 0)
    with pytest.raises(ValueError, match="d_k"):
        twirl_table(7)
    with pytest.raises(ValueError, match="rope_base"):
        twirl_table(8, 1.0)
    with pytest.raises(ValueError, match="nonresonant"):
        c_theta(np.array([0.5, 2 * np.pi * 0]))
