"""Acceptance item 5: masks and the masked softmax in float64.

* ``ideal``: E[i, j] == 0.0 exactly for every masked key (future or padding) and rows sum to 1.
* ``additive`` (native TF / PT: scores + (-1e9) * M), what it gives in float64:
  - ordinary scores (|Sc| << 1e9): exp(Sc - 1e9 - max) underflows to exactly 0.0 and unmasked logits are
    unchanged (Sc + (-1e9) * 0 = Sc), so E is **bit-identical** to ``ideal``;
  - extreme scores (|Sc| ~ 1e9 and above): the mask no longer dominates; a masked key whose score exceeds
    the unmasked ones by about 1e9 gets the weight (masking leaks), and scores are quantised to
    ulp(1e9) = 1.2e-7 where the mask is added;
  - a fully masked row (e.g. every visible key is padding) is softmax(Sc - 1e9) ~= softmax(Sc) (error
    about 1e-7 from that quantisation), so rows still sum to 1 over masked keys.
* ``finfo_min`` (HF eager, float64): Sc + finfo.min; for |Sc| < 1e292 that is finfo.min exactly, so a fully
  masked row becomes uniform 1/T; otherwise like ``ideal``.
* Fully masked row in ``ideal``: all zeros (FlashAttention convention), never NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import config_from_shape, model_params, shapes, token_ids
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import softmax

from pldr_ref import forward
from pldr_ref.attention import apply_mask, causal_padding_mask, masked_softmax
from pldr_ref.constants import FINFO_MIN_F64, MASK_VALUE

EPS = np.finfo(np.float64).eps


def assert_masked_rows(e: np.ndarray, mask: np.ndarray) -> None:
    """Masked entries are exactly 0.0; rows with a visible key sum to 1 (<= T eps)."""
    mask = np.broadcast_to(mask, e.shape)
    assert np.all(e[mask] == 0.0)
    visible = ~np.all(mask, axis=-1)
    sums = e.sum(axis=-1)
    assert np.all(np.abs(sums[visible] - 1.0) <= e.shape[-1] * EPS)


def _scores(seed: int, shape: tuple[int, ...], scale: float) -> np.ndarray:
    return scale * np.random.default_rng(seed).standard_normal(shape)


@given(seq=st.integers(1, 8), scale=st.sampled_from([1e-3, 1.0, 10.0, 300.0]), seed=st.integers(0, 999),
       pad=st.booleans())
def test_ideal_mask_zero_and_row_sums(seq: int, scale: float, seed: int, pad: bool) -> None:
    pos = np.arange(seq)
    key_pad = np.random.default_rng(seed).random((2, seq)) < 0.3 if pad else None
    mask = causal_padding_mask(pos, pos, key_pad)
    sc = _scores(seed, (2, 3, seq, seq), scale)
    e = masked_softmax(apply_mask(sc, mask, "ideal"))
    assert_masked_rows(e, mask)
    j, i = np.meshgrid(pos, pos)
    assert np.all(e[..., j > i] == 0.0)


@given(seq=st.integers(1, 8), scale=st.sampled_from([1e-3, 1.0, 10.0, 1e4]), seed=st.integers(0, 999))
def test_additive_equals_ideal_for_ordinary_scores(seq: int, scale: float, seed: int) -> None:
    """Bit-identical for |Sc| << 1e9 (the masked exp underflows to exactly 0)."""
    pos = np.arange(seq)
    mask = causal_padding_mask(pos, pos, None)
    sc = _scores(seed, (2, 3, seq, seq), scale)
    ideal = masked_softmax(apply_mask(sc, mask, "ideal"))
    np.testing.assert_array_equal(masked_softmax(apply_mask(sc, mask, "additive", MASK_VALUE)), ideal)
    np.testing.assert_array_equal(masked_softmax(apply_mask(sc, mask, "finfo_min")), ideal)


def test_additive_leaks_for_extreme_scores() -> None:
    """A future key with score 2e9 is masked to ~1e9 and takes the whole row in additive mode."""
    sc = np.zeros((1, 1, 2, 2))
    sc[0, 0, 0, 1] = 2e9
    mask = causal_padding_mask(np.arange(2), np.arange(2), None)
    additive = masked_softmax(apply_mask(sc, mask, "additive", MASK_VALUE))
    assert additive[0, 0, 0, 1] == 1.0 and additive[0, 0, 0, 0] == 0.0  # the future leaks completely
    ideal = masked_softmax(apply_mask(sc, mask, "ideal"))
    assert ideal[0, 0, 0, 1] == 0.0 and ideal[0, 0, 0, 0] == 1.0


def test_additive_quantises_scores_near_mask() -> None:
    """Scores ~1e9: Sc - 1e9 keeps only ulp(1e9) = 2**-23 resolution; a 1e-8 gap is lost."""
    assert np.spacing(1e9) == 2.0**-23
    sc = np.array([[[[1e9, 1e9 + 1e-8]]]])  # unmasked keys, both ~1e9
    e = masked_softmax(apply_mask(sc, np.zeros((1, 1, 1, 2), bool), "additive", MASK_VALUE))
    assert e.shape == (1, 1, 1, 2)
    full = np.array([[[[True, True]]]])  # both masked: the 1e-8 gap disappears, weights become equal
    e_full = masked_softmax(apply_mask(sc, full, "additive", MASK_VALUE))
    assert e_full[0, 0, 0, 0] == e_full[0, 0, 0, 1] == 0.5


def test_fully_masked_row_conventions() -> None:
    """Row 0 has only a padding key visible: ideal -> zeros, additive -> ~softmax(Sc), finfo_min -> uniform."""
    seq = 4
    pos = np.arange(seq)
    key_pad = np.array([[True, False, False, False]])
    mask = causal_padding_mask(pos, pos, key_pad)
    sc = _scores(3, (1, 2, seq, seq), 2.0)
    ideal = masked_softmax(apply_mask(sc, mask, "ideal"))
    np.testing.assert_array_equal(ideal[:, :, 0], 0.0)
    assert_masked_rows(ideal, mask)
    additive = masked_softmax(apply_mask(sc, mask, "additive", MASK_VALUE))
    row0 = softmax(sc[:, :, 0], axis=-1)  # every key of row 0 carries -1e9: they compete on Sc alone
    assert np.max(np.abs(additive[:, :, 0] - row0)) <= 4 * np.spacing(1e9)
    np.testing.assert_array_equal(additive[:, :, 1:], ideal[:, :, 1:])
    finfo = masked_softmax(apply_mask(sc, mask, "finfo_min"))
    np.testing.assert_array_equal(finfo[:, :, 0], 1.0 / seq)
    assert np.all(sc + FINFO_MIN_F64 == FINFO_MIN_F64)


def test_fully_masked_row_in_model_is_zero_not_nan() -> None:
    cfg = config_from_shape({"num_heads": 2, "d_k": 4, "num_layers": 1})
    params = model_params(cfg, 0)
    ids = np.array([[0, 5, 6, 7]])  # token 0 is padding: row 0 sees only a padding key
    out = forward(params, ids)
    np.testing.assert_array_equal(out.layers[0].E[:, :, 0], 0.0)
    assert np.all(np.isfinite(out.logits))


@pytest.mark.parametrize("mode", ["ideal", "additive", "finfo_min"])
@given(shape=shapes(), seed=st.integers(0, 2**16))
def test_model_mask_modes(mode: str, shape: dict, seed: int) -> None:
    """Full forward: exact zeros above the diagonal (ordinary scores), rows summing to 1, same E in all modes."""
    cfg = config_from_shape(shape, mask_mode=mode)
    params = model_params(cfg, seed)
    ids = token_ids(cfg, shape["batch"], shape["seq"], seed)
    out = forward(params, ids)
    s = shape["seq"]
    mask = causal_padding_mask(np.arange(s), np.arange(s), None)
    ref = forward(model_params(cfg.replace(mask_mode="ideal"), seed), ids)
    for t, r in zip(out.layers, ref.layers, strict=True):
        assert_masked_rows(t.E, mask)
        np.testing.assert_array_equal(t.E, r.E)
    np.testing.assert_array_equal(out.logits, ref.logits)


# ------------------------------------------------------------------ negative controls
def test_negative_control_off_by_one_mask_is_caught() -> None:
    """A mask that lets i see i+1 fails the row check against the true causal mask."""
    seq = 4
    pos = np.arange(seq)
    true_mask = causal_padding_mask(pos, pos, None)
    broken_mask = causal_padding_mask(pos, pos + 1, None)  # key j hidden only when j > i + 1
    sc = _scores(0, (1, 1, seq, seq), 1.0)
    e = masked_softmax(apply_mask(sc, broken_mask, "ideal"))
    with pytest.raises(AssertionError):
        assert_masked_rows(e, true_mask)


def test_negative_control_naive_softmax_fails_on_large_scores() -> None:
    """Without max subtraction exp overflows: the reference's max-shift is what keeps rows finite."""
    sc = np.array([[[[800.0, 799.0]]]])
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(sc) / np.exp(sc).sum(-1, keepdims=True)
    assert np.isnan(naive).any()
    e = masked_softmax(sc)
    assert np.all(np.isfinite(e)) and abs(e.sum() - 1.0) <= 2 * EPS


def _plain_softmax(logits: np.ndarray) -> np.ndarray:
    """exp(l - m) / sum with every exp evaluated (the formula the fast path must reproduce bit for bit)."""
    m = np.max(logits, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(logits - m)
        z = e.sum(axis=-1, keepdims=True)
        return e / np.where(z == 0, 1.0, z)


@given(scale=st.sampled_from([1.0, 300.0, 745.0, 760.0]), fill=st.sampled_from([-np.inf, -1e9, -745.5, -746.0, -740.0]),
       seed=st.integers(0, 999))
def test_softmax_skipping_underflowing_exp_is_bit_exact(scale: float, fill: float, seed: int) -> None:
    """Entries with l - m <= EXP_ZERO_BELOW skip exp (they are exactly 0.0 anyway): identical to the plain formula."""
    rng = np.random.default_rng(seed)
    x = scale * rng.standard_normal((2, 3, 40))
    x[..., rng.random(40) < 0.4] = fill
    x[0, 0] = fill  # a row made only of the fill value
    got = masked_softmax(x)
    want = _plain_softmax(x)
    np.testing.assert_array_equal(got, want)
    assert not np.signbit(got).any()


def test_softmax_nan_row_is_all_nan() -> None:
    """A NaN logit poisons its whole row (no silent zero or partial row); other rows are untouched."""
    x = np.random.default_rng(0).standard_normal((1, 1, 3, 5))
    x[0, 0, 1, 2] = np.nan
    with np.errstate(invalid="ignore"):
        e = masked_softmax(x)
    assert np.isnan(e[0, 0, 1]).all()
    assert np.isfinite(e[0, 0, [0, 2]]).all()


def test_negative_control_zeroing_nan_rows_is_caught() -> None:
    """The earlier convention (divide only where z > 0) silently zeroed a NaN row; the check above rejects it."""
    x = np.array([[[[0.0, np.nan, 1.0]]]])
    with np.errstate(invalid="ignore"):
        e = np.exp(x - 1.0)
        z = e.sum(-1, keepdims=True)
        zeroed = np.divide(e, z, out=np.zeros_like(e), where=z > 0)
    assert not np.isnan(zeroed[0, 0, 0]).all()
