"""Acceptance item 2 (second half): a ``rope_layout="half"`` model whose every d_k-indexed parameter is
permuted by pi = [0, 2, ..., d_k-2, 1, 3, ..., d_k-1] gives the logits of the interleaved model.

Why it holds (spec §2.4.3): q^half = q[pi] makes half(q^half) = interleaved(q)[pi], so A0, A and every
PLGA tensor become P X P^T; scores q~ G k~^T are unchanged.  V is not rotated and needs no permutation.
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import config_from_shape, dk_permutation_groups, model_params, permute_dk, rel_diff, shapes, token_ids
from hypothesis import given
from hypothesis import strategies as st

from pldr_ref import Params, forward, with_fixed_g
from pldr_ref.rope import interleave_permutation

LAYOUT_RTOL = 1e-12

VARIANTS = {
    "v500": {},
    "v900": {"metric_learner": "v900", "A_dff_depth": 5},
    "external_g": {"g_mode": "external", "metric_learner": "none"},
    "identity_g_v500": {"g_mode": "identity", "metric_learner": "v500"},
}


def _pair(shape: dict, variant: str, seed: int):
    fields = VARIANTS[variant]
    cfg_i = config_from_shape(shape, rope_layout="interleaved", **fields)
    cfg_h = cfg_i.replace(rope_layout="half")
    params = model_params(cfg_i, seed)
    if cfg_i.g_mode == "external":
        g = np.random.default_rng(seed).standard_normal((cfg_i.num_layers, cfg_i.num_heads, cfg_i.d_k, cfg_i.d_k))
        params = with_fixed_g(params, g)
    return cfg_i, cfg_h, params


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@given(shape=shapes(max_dk=8), seed=st.integers(0, 2**16))
def test_permuted_half_model_equals_interleaved_model(variant: str, shape: dict, seed: int) -> None:
    cfg_i, cfg_h, params = _pair(shape, variant, seed)
    pi = interleave_permutation(cfg_i.d_k)
    ids = token_ids(cfg_i, shape["batch"], shape["seq"], seed)
    ref = forward(params, ids).logits
    got = forward(permute_dk(params, cfg_h, pi), ids).logits
    assert rel_diff(got, ref) <= LAYOUT_RTOL


def test_permuted_half_model_with_float32_rope() -> None:
    """With the float32 RoPE the permuted q/k round identically, so the models still agree closely."""
    cfg_i = config_from_shape({"num_heads": 2, "d_k": 8, "num_layers": 2}, rope_precision="float32")
    params = model_params(cfg_i, 1)
    ids = token_ids(cfg_i, 2, 6, 1)
    got = forward(permute_dk(params, cfg_i.replace(rope_layout="half"), interleave_permutation(8)), ids).logits
    assert rel_diff(got, forward(params, ids).logits) <= 1e-6


# ------------------------------------------------------------------ negative controls
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_negative_control_every_group_must_be_permuted(variant: str) -> None:
    """Leaving out any single group of d_k-indexed parameters breaks the equivalence."""
    shape = {"num_heads": 2, "d_k": 6, "num_layers": 1}
    cfg_i, cfg_h, params = _pair(shape, variant, 7)
    pi = interleave_permutation(cfg_i.d_k)
    ids = token_ids(cfg_i, 2, 5, 7)
    ref = forward(params, ids).logits
    groups = dk_permutation_groups(cfg_i)
    # with G = I the metric learner is computed but ignored, and P I P^T = I: those groups are inert
    inert = {"a_norm", "glu_in", "glu_out", "res_norm", "fixed_g"} if variant == "identity_g_v500" else set()
    assert set(groups) - inert
    for group in groups:
        got = forward(permute_dk(params, cfg_h, pi, skip=(group,)), ids).logits
        if group in inert:
            assert rel_diff(got, ref) <= LAYOUT_RTOL
        else:
            assert rel_diff(got, ref) > 1e-9, f"group {group} left unpermuted went undetected"


def test_negative_control_unpermuted_half_model_differs() -> None:
    cfg_i, cfg_h, params = _pair({"num_heads": 2, "d_k": 8, "num_layers": 1}, "v500", 0)
    ids = token_ids(cfg_i, 1, 5, 0)
    assert rel_diff(forward(Params(cfg_h, dict(params)), ids).logits, forward(params, ids).logits) > 1e-6
