"""Issue 12: the exact tier evaluates every emulation switch that is an exact statement (RN32 / RN64 of real
values, explicit tables, per-row positions, masked-row overrides) and agrees with the float64 tier."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from core_support import model_params, rel_diff, token_ids

from pldr_ref import PLDRConfig, forward
from pldr_ref.exact import forward as exact_forward
from pldr_ref.exact.layer import score_scale_factor
from pldr_ref.exact.rope import rope_table
from pldr_ref.fixtures.suite_switches import explicit_table
from pldr_ref.rope import RopeTable, rope_angles

TINY = PLDRConfig.preset("tiny")


def test_exact_score_scale_factors() -> None:
    with mpmath.workdps(40):
        assert score_scale_factor(8, "exact") == 1 / mpmath.sqrt(8)
        assert score_scale_factor(8, "float32") == 1 / mpmath.mpf(float(np.sqrt(np.float32(8))))
        assert score_scale_factor(8, "reciprocal") == mpmath.mpf(1.0 / np.sqrt(8.0))
        assert score_scale_factor(64, "float32") == score_scale_factor(64, "exact") == mpmath.mpf(0.125)


def test_exact_keras_table_matches_the_float64_formula() -> None:
    for p in (1, 17, 63):
        with mpmath.workdps(40):
            cos, sin = rope_table(p, 64, 10000.0, "keras-0.6.4")
        c64, s64 = rope_angles(np.array([p]), 64, 10000.0, "keras-0.6.4")
        got = np.array([float(v) for v in cos])
        assert np.max(np.abs(got - c64[0])) <= 2.0**-52  # cos of the same binary64 angle, rounded once
        assert np.max(np.abs(np.array([float(v) for v in sin]) - s64[0])) <= 2.0**-52


CASES = {
    "tf_numerics_left_padded": (TINY.replace(score_scale="float32", mask_mode="additive", mask_add_dtype="float32",
                                             softmax_precision="float32", embed_scale_precision="float32"), {}),
    "double_cast_explicit_positions": (TINY.replace(rope_table="explicit", rope_arithmetic="float64_qk_f32",
                                                    score_scale="reciprocal"), {"positions": True, "table": True}),
    "masked_rows_uniform_hf_pads": (TINY.replace(masked_row="uniform", pad_source="attention_mask",
                                                 rope_precision="float32", rope_table="float32",
                                                 rope_arithmetic="float64"), {"mask": True}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_tier_agrees_with_float64_under_switches(name: str) -> None:
    cfg, opts = CASES[name]
    params = model_params(cfg, 21)
    ids = token_ids(cfg, 2, 5, 21)
    ids[0, :2] = cfg.pad_id
    kw: dict = {}
    if opts.get("positions"):
        kw["position_ids"] = np.array([[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]])
    if opts.get("table"):
        kw["rope_table"] = RopeTable(*explicit_table(cfg))
    if opts.get("mask"):
        kw["attention_mask"] = np.array([[0, 0, 1, 1, 1], [1] * 5])
    ex = exact_forward(params, ids, dps=30, **kw)
    f64 = forward(params, ids, **kw).flat()
    assert rel_diff(ex["logits"], f64["logits"]) <= 1e-12
    assert rel_diff(ex["layers.1.E"], f64["layers.1.E"]) <= 1e-12
    # negative control: the same exact evaluation with every switch at its default differs
    plain = exact_forward(type(params)(TINY, dict(params.items())), ids, dps=30,
                          **{k: v for k, v in kw.items() if k == "attention_mask"})
    assert rel_diff(plain["logits"], ex["logits"]) > 1e-9
