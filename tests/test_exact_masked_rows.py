"""Exact tiers under additive masks (finfo.min, mask_value): fully masked rows and ball exponents beyond float.

Issue 20 items 8 and 9.  A row whose every key is masked by adding finfo.min has the softmax of its
scores as its exact value (the same constant is added to every logit).  In float64 the constant absorbs
the scores and the row is uniform; the exact tiers must not copy that, at any working precision.
"""

from __future__ import annotations

import math
from pathlib import Path

import mpmath
import numpy as np
import pytest

import pldr_ref
from pldr_ref.constants import FINFO_MIN_F64
from pldr_ref.exact import forward
from pldr_ref.exact.arb import forward_certified
from pldr_ref.exact.arb.balls import accuracy_bits, ball, working_precision
from pldr_ref.exact.numbers import mpf_exact
from pldr_ref.exact.ops import masked_logit, softmax_row
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case

#: The issue's repro: tiny preset, HF attention mask with two left pads, init seed 0.
REPRO_IDS = [[5, 7, 1, 3]]
REPRO_MASK = [[0, 0, 1, 1]]
#: Digits at which even the absorbing sum score + finfo.min keeps the scores (|finfo.min| ~ 1.8e308).
RESOLVING_DPS = 400


def repro_params(**overrides):
    fields = {"mask_mode": "finfo_min", "pad_source": "attention_mask", **overrides}
    config = pldr_ref.PLDRConfig.preset("tiny", **fields)
    return pldr_ref.init_params(config, seed=0)


def softmax_of_scores(scores: np.ndarray) -> np.ndarray:
    """The real softmax of float64 scores, correctly rounded, from the mpmath primitives (ideal-mask row)."""
    with mpmath.workdps(RESOLVING_DPS):
        row = softmax_row([mpf_exact(s) for s in scores.tolist()])
        return np.array([float(v) for v in row])


@pytest.fixture(scope="module")
def resolved():
    """The repro's trace at 400 digits, unguarded: the value the engine's dps-50 run must equal bit for bit."""
    return forward(repro_params(), REPRO_IDS, attention_mask=REPRO_MASK, dps=RESOLVING_DPS, guard=False)


def test_mpmath_finfo_min_fully_masked_row_is_the_softmax_of_its_scores(resolved) -> None:
    got = forward(repro_params(), REPRO_IDS, attention_mask=REPRO_MASK)  # dps 50, guarded at 100
    row = got["layers.0.E"][0, 0, 0]
    np.testing.assert_allclose(row, [0.3986, 0.3760, 0.2100, 0.0154], atol=1e-4)  # the values
    assert not np.allclose(row, 0.25)
    # the true value: softmax of the row's own scores, computed from the scores alone
    np.testing.assert_allclose(row, softmax_of_scores(got["layers.0.scores"][0, 0, 0]), rtol=1e-15)
    for name, want in resolved.items():
        assert got[name].tobytes() == want.tobytes(), name


@pytest.mark.parametrize("mask_value", [-1e300, -1e9])
def test_mpmath_additive_fully_masked_row_keeps_its_scores_too(mask_value: float) -> None:
    params = repro_params(mask_mode="additive", mask_value=mask_value)
    got = forward(params, REPRO_IDS, attention_mask=REPRO_MASK)
    high = forward(params, REPRO_IDS, attention_mask=REPRO_MASK, dps=RESOLVING_DPS, guard=False)
    assert got["layers.0.E"].tobytes() == high["layers.0.E"].tobytes()
    assert not np.allclose(got["layers.0.E"][0, 0, 0], 0.25)


def test_guard_premise_masked_logits_are_exact_at_any_precision() -> None:
    """The dps / 2 dps guard sees only errors that shrink with precision: the masked sum must carry none."""
    score = mpf_exact(0.123456789)
    with mpmath.workdps(15):
        logit = masked_logit(score, True, "finfo_min", mpf_exact(-1e9), mpf_exact(FINFO_MIN_F64))
        assert mpmath.fsub(logit, mpf_exact(FINFO_MIN_F64), exact=True) == score
        row = softmax_row([logit, masked_logit(mpf_exact(-2.0), True, "finfo_min", mpf_exact(-1e9),
                                               mpf_exact(FINFO_MIN_F64))])
    with mpmath.workdps(30):
        want = 1 / (1 + mpmath.exp(mpf_exact(-2.0) - score))
    assert abs(row[0] - want) < mpmath.mpf(10) ** -13


def test_float64_tier_still_absorbs_the_scores() -> None:
    """Negative control: the float64 tier (and torch) give the uniform row the exact tiers must not give."""
    params = repro_params()
    trace = pldr_ref.forward(params, np.array(REPRO_IDS), attention_mask=np.array(REPRO_MASK)).flat()
    np.testing.assert_array_equal(trace["layers.0.E"][0, 0, 0], [0.25] * 4)


# ----------------------------------------------------------------------------- arb engine (item 9)
@pytest.mark.parametrize("prec", [512, 1024])
def test_arb_finfo_min_fully_masked_row_certifies_the_true_value(resolved, prec: int) -> None:
    res = forward_certified(repro_params(), REPRO_IDS, attention_mask=REPRO_MASK, prec=prec)
    assert res.all_certified and res.prec == prec  # no precision raise needed for the masked row
    for name, want in resolved.items():
        assert res.values[name].tobytes() == want.tobytes(), name


@pytest.mark.parametrize("prec", [512, pytest.param(1024, marks=pytest.mark.slow)])  # 1024 bits: the repro above
def test_arb_committed_finfo_min_case_at_high_precision_certifies(prec: int) -> None:
    """model/small_hf_attention_mask (finfo.min) at 512 and 1024 bits: no OverflowError, golden bits, enclosures."""
    case = load_case(Path(DEFAULT_GOLDEN_DIR) / "model" / "small_hf_attention_mask")
    res = forward_certified(case.params, case.inputs["token_ids"], attention_mask=case.inputs["attention_mask"],
                            start_pos=case.args["start_pos"], prec=prec)
    assert res.all_certified and res.prec == prec
    assert all(math.isfinite(a) or a == math.inf for a in res.accuracy.values())
    for name, want in case.outputs.items():
        assert res.values[name].tobytes() == np.asarray(want, dtype=np.float64).tobytes(), name
        lo, hi = res.enclosure(name)
        assert np.all(lo <= want) and np.all(want <= hi), name
        assert res.balls[name].shape == want.shape


def test_accuracy_bits_of_balls_beyond_the_float_exponent_range() -> None:
    """e^(finfo.min) has a binary exponent near -2.6e308: no float holds it, accuracy_bits must not overflow."""
    with working_precision(512):
        tiny = ball(FINFO_MIN_F64).exp()  # e^(finfo.min) = 2^(-2.59e308) +- a radius of that order
    assert tiny.is_finite() and tiny > 0 and tiny.rad() > 0
    assert 500 < accuracy_bits(np.array([tiny], dtype=object)) < 520  # the ball's own relative accuracy
    assert accuracy_bits(np.array([tiny, ball(1.0)], dtype=object)) == math.inf  # 2^(-2.6e308) against 1


def test_enclosure_bounds_contain_the_exact_value_and_are_refused_without_balls() -> None:
    res = forward_certified(repro_params(), REPRO_IDS, attention_mask=REPRO_MASK)
    lo, hi = res.enclosure("logits")
    assert np.all(lo <= res.values["logits"]) and np.all(res.values["logits"] <= hi)
    assert np.all(np.nextafter(lo, np.inf) >= hi - np.spacing(np.abs(hi)) * 2)  # tight: within ~2 ulps
    ball = res.balls["logits"].reshape(-1)[0]
    assert ball.mid().is_exact() and ball.rad() >= 0
    bare = forward_certified(repro_params(), REPRO_IDS, attention_mask=REPRO_MASK, keep_balls=False)
    with pytest.raises(KeyError, match="keep_balls=False"):
        bare.enclosure("logits")


def test_accuracy_report_of_a_finfo_min_preset_at_512_bits_certifies() -> None:
    """The path of `pldr-ref accuracy --preset ... --set mask_mode=finfo_min --engine arb` at a first precision of
    512 bits (6 tiny layers; v510-110m starts at 768): a report with every value certified, no OverflowError."""
    from pldr_ref.exact.accuracy import preset_report

    text = preset_report("tiny", [0], seq_len=8, engine="arb", overrides={"mask_mode": "finfo_min", "num_layers": 6})
    assert "working precision 512 bits" in text
    assert "values (100.00 %)" in text and "uncertified" not in text
