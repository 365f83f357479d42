"""Issue 12: the eight numerical behaviours of the released code bases, each pinned by a switch with a
hand-derived expectation and a negative control (docs/equations.md, "Emulation switches").

1. PT-v510 / TF score scale: Sc / f32(sqrt(d_k))              -> ``score_scale="float32"``
2. torch's float32 RoPE table values                          -> ``rope_table="explicit"`` (replayed table)
3. HF ``reference_rope=False``: f32 table, float64 rotation   -> ``rope_table="float32"``, ``rope_arithmetic="float64"``
4. ``model.double()``: f64 buffers, q/k rounded to float32     -> ``rope_arithmetic="float64_qk_f32"``
5. HF eager: float32 softmax, NaN fully masked rows            -> ``softmax_precision="float32"``, ``masked_row="nan"``
6. per-row positions of HF ``generate`` with left padding     -> ``position_ids`` [B, S], ``hf_position_ids``
7. TF / PT float32 mask addition                              -> ``mask_add_dtype="float32"``
8. keras-nlp 0.6.4 angle formula                              -> ``rope_table="keras-0.6.4"``
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import model_params, rel_diff, token_ids

from pldr_ref import PLDRConfig, forward
from pldr_ref.attention import apply_mask, attention_scores, attention_weights, softmax_float32
from pldr_ref.constants import FINFO_MIN_F64
from pldr_ref.inference.generation import generate
from pldr_ref.inference.modes import hf_position_ids
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable, apply_rope, rope_angles, rope_frequencies

TINY = PLDRConfig.preset("tiny")
F32 = np.float32


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _with(params: Params, **switches: object) -> Params:
    """The same parameters under a config with other switch values."""
    return Params(params.config.replace(**switches), dict(params.items()))


def _torchtune_f32_table(positions: np.ndarray, d_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Independent float32 table: e = f32(2i)/f32(d_k), omega = f32(1/f32(10000^e)), phi = f32(p omega),
    cos/sin correctly rounded to float32 (float64 evaluation rounded once)."""
    e = np.arange(0, d_k, 2).astype(F32) / F32(d_k)
    omega = F32(1.0) / np.array([F32(10000.0 ** float(v)) for v in e], dtype=F32)
    phi = positions.astype(F32)[:, None] * omega[None, :]
    return np.cos(phi.astype(np.float64)).astype(F32), np.sin(phi.astype(np.float64)).astype(F32)


# ----------------------------------------------------------------------------- 1. score scale
def test_score_scale_float32_changes_scores_by_exactly_the_sqrt_ratio() -> None:
    """Sc_f32 = P / f32(sqrt 8) = (P / sqrt 8) * sqrt(8) / f32(sqrt 8); the factor is 1 + 1.7114e-8."""
    rng = _rng(1)
    q, g, k = rng.standard_normal((1, 2, 5, 8)), rng.standard_normal((1, 2, 8, 8)), rng.standard_normal((1, 2, 6, 8))
    exact = attention_scores(q, g, k, "exact")
    f32 = attention_scores(q, g, k, "float32")
    factor = np.sqrt(8.0) / float(np.sqrt(F32(8.0)))
    assert abs(factor - 1 - 1.7114271e-8) < 1e-15
    assert rel_diff(f32, exact * factor) <= 4 * 2.0**-52
    assert abs(rel_diff(f32, exact) - (factor - 1)) < 1e-9 * (factor - 1) + 4 * 2.0**-52
    product = np.matmul(np.matmul(q, g), np.swapaxes(k, -1, -2))
    np.testing.assert_array_equal(attention_scores(q, g, k, "reciprocal"), product * (1.0 / np.sqrt(8.0)))
    np.testing.assert_array_equal(f32, product / float(np.sqrt(F32(8.0))))


@pytest.mark.parametrize("d_k", [16, 64])
def test_negative_control_score_scales_agree_where_sqrt_is_exact(d_k: int) -> None:
    rng = _rng(d_k)
    q, g, k = (rng.standard_normal((1, 1, 3, d_k)), rng.standard_normal((1, 1, d_k, d_k)),
               rng.standard_normal((1, 1, 3, d_k)))
    exact = attention_scores(q, g, k, "exact")
    np.testing.assert_array_equal(attention_scores(q, g, k, "float32"), exact)
    np.testing.assert_array_equal(attention_scores(q, g, k, "reciprocal"), exact)


def test_score_scale_moves_tiny_logits_only_at_dk_8() -> None:
    params = model_params(TINY, 3)
    ids = token_ids(TINY, 2, 6, 3)
    base = forward(params, ids).logits
    assert rel_diff(forward(_with(params, score_scale="float32"), ids).logits, base) > 1e-10
    wide = PLDRConfig.preset("tiny", num_heads=1, d_k=16)
    p16 = model_params(wide, 3)
    np.testing.assert_array_equal(forward(_with(p16, score_scale="float32"), ids).logits, forward(p16, ids).logits)


# ----------------------------------------------------------------------------- 2. explicit tables
def test_explicit_table_replays_the_float32_table_bit_for_bit() -> None:
    d_k, pos = 8, np.arange(12)
    cos, sin = _torchtune_f32_table(pos, d_k)
    x = _rng(2).standard_normal((2, 3, 12, d_k))
    table = RopeTable(cos, sin)
    got = apply_rope(x, pos, table="explicit", arithmetic="float32", explicit=table)
    np.testing.assert_array_equal(got, apply_rope(x, pos, precision="float32"))


def test_explicit_table_entries_are_used_as_given() -> None:
    """An identity table (cos 1, sin 0) leaves x unchanged; one entry moved by one float32 ulp changes only the
    rows at that position."""
    d_k, pos = 8, np.arange(6)
    x = _rng(3).standard_normal((1, 2, 6, d_k))
    ident = RopeTable(np.ones((6, 4)), np.zeros((6, 4)))
    np.testing.assert_array_equal(apply_rope(x, pos, table="explicit", explicit=ident), x)
    cos, sin = _torchtune_f32_table(pos, d_k)
    moved = cos.copy()
    moved[3, 1] = np.nextafter(moved[3, 1], F32(2.0))
    a = apply_rope(x, pos, table="explicit", arithmetic="float64", explicit=RopeTable(cos, sin))
    b = apply_rope(x, pos, table="explicit", arithmetic="float64", explicit=RopeTable(moved, sin))
    changed = np.argwhere(a != b)
    assert changed.size and set(changed[:, 2]) == {3}


def test_explicit_table_errors_name_the_problem() -> None:
    x = np.zeros((1, 1, 3, 8))
    with pytest.raises(ValueError, match="needs a RopeTable"):
        apply_rope(x, np.arange(3), table="explicit")
    with pytest.raises(ValueError, match="outside the RopeTable"):
        apply_rope(x, np.arange(3) + 1, table="explicit", explicit=RopeTable(np.ones((3, 4)), np.zeros((3, 4))))
    with pytest.raises(ValueError, match="d_k=8 needs 4"):
        apply_rope(x, np.arange(3), table="explicit", explicit=RopeTable(np.ones((3, 2)), np.zeros((3, 2))))
    with pytest.raises(ValueError, match="differ in shape"):
        RopeTable(np.ones((3, 4)), np.zeros((2, 4)))


# ----------------------------------------------------------------------------- 3. + 4. RoPE arithmetic
def test_hf_reference_rope_false_is_f32_table_with_float64_rotation() -> None:
    """y = x1 c32 - x2 s32, y2 = x2 c32 + x1 s32 in float64 with x unrounded (half-split pairs)."""
    pos = np.arange(7)
    x = _rng(4).standard_normal((1, 2, 7, 8)) * 3
    c, s = _torchtune_f32_table(pos, 8)
    c, s = c.astype(np.float64), s.astype(np.float64)
    x1, x2 = x[..., :4], x[..., 4:]
    want = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    got = apply_rope(x, pos, layout="half", table="float32", arithmetic="float64")
    np.testing.assert_array_equal(got, want)
    assert rel_diff(got, apply_rope(x, pos, layout="half", precision="float32")) > 1e-9  # not the f32 rotation
    assert rel_diff(got, apply_rope(x, pos, layout="half", precision="exact")) > 1e-9  # nor the exact table


def test_double_cast_rounds_q_k_to_float32_and_rotates_in_float64() -> None:
    pos = np.arange(5)
    x = _rng(5).standard_normal((1, 1, 5, 8)) * 3
    c, s = (t.astype(np.float64) for t in _torchtune_f32_table(pos, 8))
    xr = x.astype(F32).astype(np.float64)
    x1, x2 = xr[..., 0::2], xr[..., 1::2]
    want = np.stack([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).reshape(x.shape)
    got = apply_rope(x, pos, table="float32", arithmetic="float64_qk_f32")
    np.testing.assert_array_equal(got, want)
    assert rel_diff(got, apply_rope(x, pos, table="float32", arithmetic="float64")) > 1e-9
    assert rel_diff(got, apply_rope(x, pos, precision="float32")) > 1e-10


def test_rope_precision_alias_and_explicit_switches() -> None:
    alias = TINY.replace(rope_precision="float32")
    assert (alias.rope_table_source, alias.rope_arithmetic_dtype) == ("float32", "float32")
    assert (TINY.rope_table_source, TINY.rope_arithmetic_dtype) == ("exact", "float64")
    both = alias.replace(rope_table="keras-0.6.4", rope_arithmetic="float64_qk_f32")
    assert (both.rope_table_source, both.rope_arithmetic_dtype) == ("keras-0.6.4", "float64_qk_f32")
    with pytest.raises(ValueError, match=r"PLDRConfig\.rope_arithmetic='float16' is not one of"):
        TINY.replace(rope_arithmetic="float16")


# ----------------------------------------------------------------------------- 5. HF eager
def test_float32_softmax_is_the_rounded_softmax_of_rounded_logits() -> None:
    row = np.array([[FINFO_MIN_F64, 0.0, 1.0, 0.1]])
    e = softmax_float32(row)
    z = np.exp(0.0 - 1) + 1 + np.exp(float(F32(0.1)) - 1)
    want = np.array([0.0, np.exp(-1.0) / z, 1 / z, np.exp(float(F32(0.1)) - 1) / z]).astype(F32).astype(np.float64)
    np.testing.assert_array_equal(e[0], want)
    logits = _rng(6).standard_normal((3, 9)) * 4
    e32, e64 = softmax_float32(logits), attention_weights(logits, None)
    assert 0 < rel_diff(e32, e64) <= 2.0**-22  # logits and E each rounded once to float32
    np.testing.assert_array_equal(e32, e32.astype(F32).astype(np.float64))


def _left_padded(config: PLDRConfig) -> tuple[Params, np.ndarray, np.ndarray]:
    params = model_params(config, 7)
    ids = token_ids(config, 2, 6, 7)
    mask = np.ones((2, 6), dtype=np.int64)
    mask[0, :2] = 0  # two left pads: query rows 0 and 1 of sample 0 see only padding keys
    return params, ids, mask


def test_hf_eager_fully_masked_row_is_nan_and_the_global_gram_spreads_it() -> None:
    params, ids, mask = _left_padded(TINY.emulate("hf-eager"))
    out = forward(params, ids, attention_mask=mask, check_finite_values=False)
    e0 = out.layers[0].E
    assert np.isnan(e0[0, :, :2]).all() and np.isfinite(e0[0, :, 2:]).all()
    assert np.isnan(out.layers[1].A0[0]).all()  # the Gram of layer 1 sums every query row of sample 0
    assert np.isnan(out.logits[0]).all() and np.isfinite(out.logits[1]).all()
    with pytest.raises(FloatingPointError, match=r"stage 'layers\.0\.E' produced"):
        forward(params, ids, attention_mask=mask)


def test_negative_control_sdpa_and_float64_finfo_rows_stay_finite() -> None:
    params, ids, mask = _left_padded(TINY.emulate("hf-sdpa"))
    out = forward(params, ids, attention_mask=mask)
    assert np.all(out.layers[0].E[0, :, :2] == 0.0)  # safe softmax: zeros
    finfo = forward(_with(params, mask_mode="finfo_min", masked_row="arithmetic"), ids, attention_mask=mask)
    np.testing.assert_array_equal(finfo.layers[0].E[0, :, :2], np.full((2, 2, 6), 1 / 6))  # uniform in float64


@pytest.mark.parametrize(("masked_row", "fill"), [("zeros", 0.0), ("uniform", 0.25), ("nan", np.nan)])
def test_masked_row_overrides_only_fully_masked_rows(masked_row: str, fill: float) -> None:
    logits = _rng(8).standard_normal((1, 1, 3, 4))
    mask = np.array([[[[True, True, True, True], [False, True, True, True], [False, False, False, False]]]])
    base = attention_weights(apply_mask(logits, mask, "ideal"), mask)
    got = attention_weights(apply_mask(logits, mask, "ideal"), mask, masked_row=masked_row)
    np.testing.assert_array_equal(got[..., 1:, :], base[..., 1:, :])
    np.testing.assert_array_equal(got[..., 0, :], np.full((1, 1, 4), fill))


# ----------------------------------------------------------------------------- 6. positions
def test_hf_position_ids_are_cumsum_minus_one_with_pads_at_one() -> None:
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    np.testing.assert_array_equal(hf_position_ids(mask, "4.x"), [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4], [1, 0, 1, 2, 3]])


def test_per_row_position_ids_equal_separate_calls_at_their_start() -> None:
    params = model_params(TINY, 9)
    ids = token_ids(TINY, 2, 5, 9)
    pos = np.array([np.arange(5), np.arange(5) + 3])
    both = forward(params, ids, position_ids=pos).logits
    assert rel_diff(both[0], forward(params, ids[:1]).logits[0]) <= 1e-13  # batch GEMMs round differently
    assert rel_diff(both[1], forward(params, ids[1:], start_pos=3).logits[0]) <= 1e-13
    assert rel_diff(both[1], forward(params, ids[1:]).logits[0]) > 1e-3  # negative control: positions matter
    with pytest.raises(ValueError, match="position_ids has shape"):
        forward(params, ids, position_ids=np.arange(5))
    with pytest.raises(ValueError, match="max_seq_len=64"):
        forward(params, ids, position_ids=pos + 60)


def test_hf_left_padded_generation_uses_per_row_positions() -> None:
    cfg = TINY.emulate("hf-sdpa")
    params = model_params(cfg, 10)
    prompt = token_ids(cfg, 2, 5, 10)
    mask = np.ones((2, 5), dtype=np.int64)
    mask[0, :2] = 0
    res = generate(params, prompt, 3, mode="hf-generate-4.x", attention_mask=mask, return_traces=True)
    np.testing.assert_array_equal(res.traces[0].positions, [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]])
    assert [t.positions.tolist() for t in res.traces[1:]] == [[[3], [5]], [[4], [6]]]
    first = res.traces[0].layers[0]
    # first real token: angle 0, so the float32 rotation only rounds q to float32
    np.testing.assert_array_equal(first.q_rot[0, :, 2], first.q[0, :, 2].astype(F32).astype(np.float64))
    assert not np.array_equal(first.q_rot[0, :, 3], first.q[0, :, 3].astype(F32).astype(np.float64))
    other = generate(params, prompt, 3, mode="hf", attention_mask=mask)  # direct calls: cache_position
    assert rel_diff(other.step_logits[:, 0], res.step_logits[:, 0]) > 1e-3  # O(1) on the padded row
    np.testing.assert_array_equal(other.step_logits[0, 1], res.step_logits[0, 1])  # unpadded row: same prefill


# ----------------------------------------------------------------------------- 7. float32 mask addition
def test_float32_mask_addition_absorbs_small_scores() -> None:
    scores = np.array([[[[100.3, 31.9, -31.9, 0.0, 7.0]]]])
    mask = np.array([[[[True, True, True, True, False]]]])
    got = apply_mask(scores, mask, "additive", -1e9, "float32")
    # ulp(1e9) = 64 in float32: |Sc| < 32 rounds to -1e9; 100.3 - 1e9 rounds to -999999872 = -15624998 * 64
    np.testing.assert_array_equal(got, [[[[-999999872.0, -1e9, -1e9, -1e9, 7.0]]]])
    full = np.array([[[[True] * 4]]])
    row = scores[..., :4] * 0.25
    e32 = attention_weights(apply_mask(row, full, "additive", -1e9, "float32"), full)
    np.testing.assert_array_equal(e32, np.full((1, 1, 1, 4), 0.25))  # uniform
    e64 = attention_weights(apply_mask(row, full, "additive", -1e9), full)
    assert rel_diff(e64, e32) > 0.1  # float64 addition keeps softmax(Sc)
    with pytest.raises(ValueError, match="needs mask_mode='additive'"):
        TINY.replace(mask_add_dtype="float32")


def test_float32_mask_addition_moves_left_padded_logits() -> None:
    cfg = TINY.replace(mask_mode="additive")
    params, ids, mask = _left_padded(cfg)
    a = forward(params, ids, attention_mask=mask).logits
    b = forward(_with(params, mask_add_dtype="float32"), ids, attention_mask=mask).logits
    assert rel_diff(b[0], a[0]) > 1e-2
    np.testing.assert_array_equal(a[1], b[1])  # nothing fully masked in sample 1: identical


# ----------------------------------------------------------------------------- 8. keras-nlp 0.6.4
def test_keras_064_frequencies_are_one_over_base_power_in_float64() -> None:
    want = np.array([1.0 / 10000.0 ** (float(2 * i) / 64.0) for i in range(32)])
    got = rope_frequencies(64, 10000.0, "keras-0.6.4")
    np.testing.assert_array_equal(got, want)
    exact = rope_frequencies(64, 10000.0, "exact")
    assert np.sum(got != exact) >= 5 and rel_diff(got, exact) < 4 * 2.0**-52
    np.testing.assert_array_equal(rope_frequencies(8, 10000.0, "keras-0.6.4"), rope_frequencies(8, 10000.0))
    pos = np.arange(300)
    c, _ = rope_angles(pos, 64, 10000.0, "keras-0.6.4")
    assert np.array_equal(c, np.cos(pos[:, None] * want[None, :]))


# ----------------------------------------------------------------------------- profiles
def test_emulate_sets_the_documented_switches() -> None:
    from pldr_ref.config import EMULATIONS

    for name, switches in EMULATIONS.items():
        cfg = TINY.emulate(name, A_dff_depth=6) if name == "tf-v900" else TINY.emulate(name)
        assert {k: getattr(cfg, k) for k in switches} == switches
        assert (cfg.num_layers, cfg.d_k, cfg.vocab_size) == (TINY.num_layers, TINY.d_k, TINY.vocab_size)
    with pytest.raises(ValueError, match="unknown emulation profile 'hf-flash'"):
        TINY.emulate("hf-flash")


def test_from_hf_config_attn_implementation_picks_the_profile() -> None:
    from pldr_ref.config import EMULATIONS

    eager = PLDRConfig.from_hf_config({}, attn_implementation="eager")
    sdpa = PLDRConfig.from_hf_config({})
    for name, cfg in (("hf-eager", eager), ("hf-sdpa", sdpa)):
        assert {k: getattr(cfg, k) for k in EMULATIONS[name]} == EMULATIONS[name]
    half = PLDRConfig.from_hf_config({"reference_rope": False})
    assert (half.rope_layout, half.rope_table_source, half.rope_arithmetic_dtype) == ("half", "float32", "float64")
    with pytest.raises(ValueError, match="attn_implementation='flash_attention_2' is not one of"):
        PLDRConfig.from_hf_config({}, attn_implementation="flash_attention_2")


def test_hf_profiles_never_mask_without_an_attention_mask() -> None:
    cfg = TINY.emulate("hf-sdpa")
    params = model_params(cfg, 11)
    ids = token_ids(cfg, 1, 6, 11)
    ids[0, 2] = cfg.pad_id  # a token equal to the pad id, no attention mask
    hf = forward(params, ids).logits
    np.testing.assert_array_equal(hf, forward(params, ids, pad_masking=False).logits)
    assert rel_diff(forward(params, ids, pad_masking=True).logits, hf) > 1e-3  # native would mask it


def test_explicit_position_ids_continue_per_row_in_every_cache_mode() -> None:
    params = model_params(TINY, 12)
    prompt = token_ids(TINY, 2, 5, 12)
    pos = np.array([np.arange(5), np.arange(5) + 10])
    for mode in ("kv+g", "kv", "hf"):
        res = generate(params, prompt, 3, mode=mode, position_ids=pos, return_traces=True)
        assert [t.positions.tolist() for t in res.traces[1:]] == [[[5], [15]], [[6], [16]]], mode
    none = generate(params, prompt, 3, mode="none", position_ids=pos, return_traces=True)
    np.testing.assert_array_equal(none.traces[2].positions, [np.arange(7), np.arange(7) + 10])
    alone = generate(params, prompt[1:], 3, mode="none", position_ids=pos[1:])
    np.testing.assert_array_equal(alone.tokens[0], none.tokens[1])
    assert rel_diff(alone.step_logits[:, 0], none.step_logits[:, 1]) <= 1e-13
    shifted = generate(params, prompt[1:], 3, mode="none")  # negative control: rows at 0..T-1
    assert rel_diff(shifted.step_logits[:, 0], alone.step_logits[:, 0]) > 1e-3
