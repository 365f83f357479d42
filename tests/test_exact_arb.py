"""The arb engine (pldr_ref.exact.arb): certified rounding, Ziv's loop, the uncertified path, enclosures.

Expected values come from independent code: ``pldr_ref.exact.numbers.round_mpf`` (mpmath integer
rounding) for the rounding primitive and the mpmath engine (``pldr_ref.exact.model.forward_mp``)
at twice the working precision for the enclosures.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from flint import arb
from hypothesis import given, settings
from hypothesis import strategies as hs
from mpmath.libmp import from_man_exp

from pldr_ref.config import PLDRConfig
from pldr_ref.exact import forward as exact_forward
from pldr_ref.exact.arb import (
    UncertifiedError,
    arb_op,
    arb_op_certified,
    certify,
    forward_certified,
    next_precision,
)
from pldr_ref.exact.arb import (
    forward as arb_forward,
)
from pldr_ref.exact.arb.balls import (
    _dyadic_to_float64,
    balls,
    round_ball,
    round_balls,
    working_precision,
)
from pldr_ref.exact.arb.model import REQUIRED_BITS, check_projection, forward_stages
from pldr_ref.exact.arb.stages import Float32Rounder, NeedPrecisionError
from pldr_ref.exact.model import ExactModel, forward_mp
from pldr_ref.exact.numbers import round_mpf
from pldr_ref.params import init_params, perturb_params

TINY = PLDRConfig.preset("tiny")
#: An odd 27-bit integer whose square is an odd 54-bit integer: x^2 lies exactly halfway between two binary64
#: values (the binary64 numbers in [2^53, 2^54) are the even integers), so x^2 sits on a rounding boundary.
ODD_BASE = 94906267.0
#: The even neighbour: its square is an even integer below 2^54, hence a binary64 number (no boundary).
EVEN_BASE = 94906266.0


def _mpf(man: int, exp: int) -> mpmath.mpf:
    return mpmath.mp.make_mpf(from_man_exp(man, exp))


# ----------------------------------------------------------------------------- rounding primitive
@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(man=hs.integers(-(1 << 120), 1 << 120), exp=hs.integers(-1250, 1000))
def test_dyadic_rounding_matches_mpmath_integer_rounding(man: int, exp: int) -> None:
    got = _dyadic_to_float64(man, exp)
    want = round_mpf(_mpf(man, exp)) if man else 0.0
    assert got == want or (math.isnan(got) and math.isnan(want))
    assert math.copysign(1.0, got) == math.copysign(1.0, want)


def test_dyadic_rounding_avoids_double_rounding() -> None:
    # 2^60 + 2^8 + 1 scaled into the subnormals (ulp 2^9 in mantissa units): the true value is just above a tie.
    man, exp = (1 << 60) + (1 << 8) + 1, -1083
    want = round_mpf(_mpf(man, exp))
    assert _dyadic_to_float64(man, exp) == want == math.ldexp((1 << 60) + (1 << 9), exp)
    # negative control: rounding to 53 bits first, then scaling, lands on the tie and rounds down
    assert math.ldexp(float(man), exp) != want


def test_round_ball_certifies_only_decided_balls() -> None:
    with working_precision(128):
        exact = arb(0.1)
        assert round_ball(exact) == (0.1, True)
        third = arb(1) / 3
        assert round_ball(third) == (1 / 3, True)
        # a ball around the midpoint between 1 and 1 + 2^-52 cannot decide
        tie = arb(((1 << 53) + 1, -53))  # exactly halfway: an exact ball is decided (ties to even)
        assert round_ball(tie) == (1.0, True)
        straddle = arb(((1 << 53) + 1, -53), 2.0**-90)
        value, ok = round_ball(straddle)
        assert not ok and value in (1.0, 1.0 + 2**-52)
        # a ball around zero: the sign of the rounded zero is undecided unless the value is known >= 0
        around_zero = arb(0, (1, -1200))
        assert not round_ball(around_zero)[1]
        assert round_ball(around_zero.nonnegative_part(), nonneg=True) == (0.0, True)
        vals, ok = round_balls(np.array([exact, straddle], dtype=object))
        assert ok.tolist() == [True, False] and vals[0] == 0.1


# ----------------------------------------------------------------------------- Ziv's loop
def test_ziv_raises_precision_until_certified() -> None:
    calls: list[int] = []

    def compute(prec: int, final: bool):
        calls.append(prec)
        x = balls(np.array([2.0, 3.0, 10.0]))
        yield "out", np.vectorize(lambda v: v.sqrt().exp(), otypes=[object])(x), True, False

    res = certify(compute, prec=8, max_prec=4096)
    assert res.all_certified and res.counts() == (3, 3)
    assert calls == [a.prec for a in res.attempts] and len(calls) >= 2
    assert all(b > a for a, b in itertools.pairwise(calls)) and calls[-1] < 4096
    with mpmath.workdps(60):
        want = [round_mpf(mpmath.exp(mpmath.sqrt(v))) for v in (2, 3, 10)]
    assert res.values["out"].tolist() == want
    # negative control: capped at the first precision, the same computation stays uncertified
    capped = certify(compute, prec=8, max_prec=8)
    assert not capped.all_certified and capped.prec == 8


def test_next_precision_grows_and_is_capped() -> None:
    assert next_precision(128, 10.0, 1, 1, 4096) == 192  # at least 1.5 x
    assert next_precision(256, 200.0, 1, 4, 4096) == 960  # 200 bits lost in 1 of 4 stages: 800 + 117
    assert next_precision(1024, 5000.0, 1, 1, 2048) == 2048


def test_binary32_rounding_of_balls() -> None:
    tie32 = arb(((1 << 24) + 1, -24), (1, -60))  # around the midpoint between 1 and 1 + 2^-23
    exact = np.array([arb(((1 << 24) + 1, -24))], dtype=object)  # exactly halfway: ties to even -> 1.0
    with working_precision(128):
        assert Float32Rounder()(exact)[0].mid().man_exp() == (1, 0)
        with pytest.raises(NeedPrecisionError):
            Float32Rounder()(np.array([tie32], dtype=object))
        final = Float32Rounder(final=True)
        out = final(np.array([tie32, arb(0.1)], dtype=object))
        assert final.undecided == 1 and float(out[1]) == float(np.float32(0.1))


def test_projection_stops_a_hopeless_attempt_and_suggests_a_precision() -> None:
    check_projection([700.0, 650.0], 4, 768)  # 650 - 4 x 50 = 450 bits left: continue
    with pytest.raises(NeedPrecisionError) as err:
        check_projection([700.0, 560.0], 4, 768)  # 560 - 4 x 140 = 0 bits left: stop
    assert err.value.suggested_prec == 768 + REQUIRED_BITS + 64
    with pytest.raises(NeedPrecisionError):  # the largest loss of one layer counts, not the average
        check_projection([700.0, 690.0, 450.0], 2, 768)  # average 125: 200 left; max 240: none


def test_uncertified_path_on_a_rounding_boundary() -> None:
    a_lm = np.array([[[[ODD_BASE]]]])
    p = np.array([[[2.0]]])
    res = arb_op_certified("potential_tensor", a_lm, p, prec=64, max_prec=512)
    assert not res.all_certified and res.uncertified() == {"out": 1}
    assert [a.prec for a in res.attempts][-1] == 512 and len(res.attempts) >= 3  # the loop ran to the limit
    boundary = ODD_BASE * ODD_BASE  # float64 product: one of the two neighbours of the exact odd square
    assert abs(res.values["out"].item() - boundary) <= 2.0
    with pytest.raises(UncertifiedError, match="not certified at 512 bits"):
        arb_op("potential_tensor", a_lm, p, prec=64, max_prec=512)
    # negative control: the even neighbour's square is a binary64 number, and it is certified
    even = arb_op("potential_tensor", np.array([[[[EVEN_BASE]]]]), p, prec=64, max_prec=512)
    assert even.item() == EVEN_BASE * EVEN_BASE  # exact in float64: the product has <= 53 bits


def test_forward_uncertified_when_capped_then_certified() -> None:
    params = perturb_params(init_params(TINY, 0), 1000)
    ids = np.array([[3, 5, 7, 9]])
    with pytest.raises(UncertifiedError):
        arb_forward(params, ids, prec=64, max_prec=64)
    res = forward_certified(params, ids, prec=64)
    assert res.all_certified and len(res.attempts) >= 2 and res.attempts[0].stopped_at is not None


def test_public_forward_engines_agree_bitwise() -> None:
    params = perturb_params(init_params(TINY, 3), 1003)
    ids = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 0, 0]])
    a = exact_forward(params, ids, engine="arb")
    m = exact_forward(params, ids, engine="mpmath")
    assert list(a) == list(m)
    for name in m:
        assert a[name].shape == m[name].shape
        assert np.array_equal(a[name].view(np.int64), m[name].view(np.int64)), name
    with pytest.raises(ValueError, match="engine must be one of"):
        exact_forward(params, ids, engine="flint")


# ----------------------------------------------------------------------------- enclosures
def _contains(b: object, v: mpmath.mpf) -> bool:
    sign, man, exp, _ = v._mpf_
    return b.contains(arb(((-1) ** sign * man, exp))) if man else b.contains(arb(0))


@pytest.mark.parametrize("overrides", [{}, {"rope_precision": "float32", "embed_scale_precision": "float32",
                                            "mask_mode": "additive"}, {"gram_mode": "cumulative"}])
def test_balls_enclose_mpmath_at_twice_the_precision(overrides: dict) -> None:
    config = TINY.replace(**overrides)
    params = perturb_params(init_params(config, 1), 1001)
    ids = np.array([[4, 9, 2, 0], [7, 1, 3, 5]])
    prec = 192
    dps = int(2 * prec * math.log10(2))  # twice the working precision, in digits
    reference = forward_mp(ExactModel(params), ids, dps=dps, key_padding=ids == config.pad_id)
    checked = 0
    with working_precision(prec):
        for name, bl, _nonneg, tainted in forward_stages(params, ids, start_pos=0, key_padding=ids == config.pad_id,
                                                        final=False):
            assert not tainted
            ref = np.array(reference[name], dtype=object).reshape(bl.shape)
            inside = [_contains(b, v) for b, v in zip(bl.reshape(-1), ref.reshape(-1), strict=True)]
            assert all(inside), f"{name}: {inside.count(False)} mpmath values outside their balls"
            # negative control: the midpoints alone (radius 0) miss most reference values
            if name.endswith("out2"):
                mids = [_contains(b.mid(), v) for b, v in zip(bl.reshape(-1), ref.reshape(-1), strict=True)]
                assert mids.count(False) > len(mids) // 2
            checked += bl.size
    assert checked > 1000


@pytest.mark.parametrize("switch", sorted(__import__("pldr_ref.exact.arb.model", fromlist=["x"]).ARB_SWITCH_VALUES))
def test_arb_refuses_switch_values_it_does_not_evaluate(switch):
    """A non-default issue-12 switch is refused by name, never silently evaluated at its default."""
    from pldr_ref import PLDRConfig, init_params
    from pldr_ref.config import _CHOICES
    from pldr_ref.exact import forward as exact_forward
    from pldr_ref.exact.arb.model import ARB_SWITCH_VALUES

    other = next(v for v in _CHOICES[switch] if v not in (ARB_SWITCH_VALUES[switch], "explicit"))
    extra = {"mask_mode": "additive"} if switch == "mask_add_dtype" else {}
    params = init_params(PLDRConfig.preset("tiny", **{switch: other}, **extra), seed=0)
    with pytest.raises(NotImplementedError, match=switch):
        exact_forward(params, np.array([[1, 2, 3]]), engine="arb")
    control = init_params(PLDRConfig.preset("tiny"), seed=0)
    assert exact_forward(control, np.array([[1, 2, 3]]), engine="arb")["logits"].shape == (1, 3, 64)
