"""Constants (spec §3), the embedding-scale switch (§12), and the building blocks checked against
independent formulas: LayerNorm, SwiGLU, the v500 and v900 metric learners (§2.4.5-6, §2.6)."""

from __future__ import annotations

import numpy as np
import pytest
from core_support import config_from_shape, model_params, rel_diff, shapes, token_ids
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import expit

from pldr_ref import PLDRConfig, forward
from pldr_ref import constants as k
from pldr_ref.attention import attention_scores
from pldr_ref.glu import glu
from pldr_ref.metric_learner import metric_learner
from pldr_ref.model import embedding_scale
from pldr_ref.norms import layer_norm


def test_constants_match_spec() -> None:
    assert (k.EPS_LN, k.EPS_ADJ, k.MASK_VALUE, k.ROPE_BASE, k.FILTERED_LOGIT) == (1e-6, 1e-9, -1e9, 10000.0, -1e10)
    assert k.FINFO_MIN_F64 == -1.7976931348623157e308
    cfg = PLDRConfig()
    assert (cfg.eps_ln, cfg.eps_adj, cfg.mask_value, cfg.rope_base) == (1e-6, 1e-9, -1e9, 10000.0)


def test_embedding_scale_switch() -> None:
    """sqrt(896): float32 constant 29.933259963989258 (PT-v510 / TF) vs float64 29.93325909419153 (spec §3)."""
    cfg = PLDRConfig.preset("v510-110m")
    assert embedding_scale(cfg) == 29.933259963989258
    assert embedding_scale(cfg.replace(embed_scale_precision="exact")) == 29.93325909419153
    tiny = PLDRConfig.preset("tiny", embed_scale_precision="float32", num_heads=3, d_k=6)
    params = model_params(tiny, 0)
    ids = token_ids(tiny, 1, 3, 0)
    emb = params["decoder.embedding.weight"][ids]
    np.testing.assert_array_equal(forward(params, ids).embed, emb * float(np.float32(np.sqrt(np.float32(18)))))
    assert embedding_scale(tiny) != embedding_scale(tiny.replace(embed_scale_precision="exact"))


def _ln(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


@given(n=st.sampled_from([1, 2, 7, 64]), scale=st.sampled_from([1e-4, 1.0, 1e3]), seed=st.integers(0, 999))
def test_layer_norm_formula(n: int, scale: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = scale * rng.standard_normal((3, 4, n)) + rng.standard_normal()
    g, b = rng.standard_normal(n), rng.standard_normal(n)
    assert rel_diff(layer_norm(x, g, b, 1e-6), _ln(x, g, b, 1e-6)) <= 1e-13


def test_negative_control_layer_norm_eps_matters() -> None:
    x = 1e-3 * np.random.default_rng(0).standard_normal((1, 8))
    g, b = np.ones(8), np.zeros(8)
    assert rel_diff(layer_norm(x, g, b, 1e-6), _ln(x, g, b, 0.0)) > 1e-3


def _glu(x, p):
    def lin(z, w, bias):
        return np.einsum("...i,oi->...o", z, w) + (0 if bias is None else bias)

    z1 = lin(x, p.w1, p.b1)
    return lin(z1 * expit(z1) * lin(x, p.w2, p.b2), p.w3, p.b3)


def _res(a, unit, eps):
    h = a
    for gp in unit.glus:
        h = _glu(h, gp)
    return _ln(h + a, unit.norm.gamma, unit.norm.beta, eps)


def _learner_v500(a0, lp, eps):
    a = _ln(a0, lp.a_norm.gamma, lp.a_norm.beta, eps)
    for unit in lp.res_units:
        a = _res(a, unit, eps)
    return a


def _learner_v900(a0, lp, eps):
    a = _ln(np.einsum("...i,oi->...o", a0, lp.lift[0]) + lp.lift[1], lp.lift_norm.gamma, lp.lift_norm.beta, eps)
    for unit in lp.res_units:
        a = _res(a, unit, eps)
    return _ln(np.einsum("...i,oi->...o", a, lp.drop[0]) + lp.drop[1], lp.drop_norm.gamma, lp.drop_norm.beta, eps)


@pytest.mark.parametrize("kind", ["v500", "v900"])
@given(shape=shapes(max_dk=8), seed=st.integers(0, 2**16), glu_bias=st.booleans())
def test_metric_learner_formula(kind: str, shape: dict, seed: int, glu_bias: bool) -> None:
    extra = {"metric_learner": "v900", "A_dff_depth": 5} if kind == "v900" else {}
    cfg = config_from_shape(shape, glu_bias=glu_bias, **extra)
    lp = model_params(cfg, seed).layer(0)
    a0 = np.random.default_rng(seed).standard_normal((2, cfg.num_heads, cfg.d_k, cfg.d_k))
    ref = (_learner_v900 if kind == "v900" else _learner_v500)(a0, lp, cfg.eps_ln)
    assert rel_diff(metric_learner(a0, lp, kind, cfg), ref) <= 1e-12
    if kind == "v500":  # the GLU itself, on rows of width d_k
        assert rel_diff(glu(a0, lp.res_units[0].glus[0]), _glu(a0, lp.res_units[0].glus[0])) <= 1e-13


def test_negative_control_learner_variants_differ() -> None:
    """v500 and v900 are different maps, and dropping the residual changes the result."""
    cfg = config_from_shape({"num_heads": 2, "d_k": 4, "num_layers": 1})
    lp = model_params(cfg, 0).layer(0)
    a0 = np.random.default_rng(0).standard_normal((1, 2, 4, 4))
    out = metric_learner(a0, lp, "v500", cfg)
    a = _ln(a0, lp.a_norm.gamma, lp.a_norm.beta, cfg.eps_ln)
    for unit in lp.res_units:
        h = a
        for gp in unit.glus:
            h = _glu(h, gp)
        a = _ln(h, unit.norm.gamma, unit.norm.beta, cfg.eps_ln)  # residual dropped
    assert rel_diff(out, a) > 1e-3
    with pytest.raises(ValueError, match="metric_learner kind 'none' computes no A"):
        metric_learner(a0, lp, "none", cfg)


@pytest.mark.parametrize("d_k", [2, 4, 6, 8, 16, 64])
def test_attention_scores_formula(d_k: int) -> None:
    """Sc = (Q~ G) K~^T / sqrt(d_k); for sqrt(d_k) = 2^n the reference pre-scales Q~G, which is bit-identical."""
    rng = np.random.default_rng(d_k)
    q, kk = rng.standard_normal((2, 3, 5, d_k)), rng.standard_normal((2, 3, 7, d_k))
    g = rng.standard_normal((2, 3, d_k, d_k))
    ref = np.matmul(np.matmul(q, g), np.swapaxes(kk, -1, -2)) / np.sqrt(d_k)
    np.testing.assert_array_equal(attention_scores(q, g, kk), ref)
    g_rows = rng.standard_normal((2, 3, 5, d_k, d_k))  # cumulative Gram: one operator per query row
    ref_rows = np.einsum("bhsi,bhsij,bhtj->bhst", q, g_rows, kk) / np.sqrt(d_k)
    assert rel_diff(attention_scores(q, g_rows, kk), ref_rows) <= 1e-14


def test_negative_control_unscaled_scores_differ() -> None:
    rng = np.random.default_rng(0)
    q, kk, g = rng.standard_normal((1, 1, 3, 4)), rng.standard_normal((1, 1, 3, 4)), np.eye(4)[None, None]
    assert rel_diff(attention_scores(q, g, kk), q @ np.swapaxes(kk, -1, -2)) > 0.4


def test_keep_trace_false_gives_the_same_logits() -> None:
    cfg = config_from_shape({"num_heads": 2, "d_k": 4, "num_layers": 2})
    params = model_params(cfg, 0)
    ids = token_ids(cfg, 2, 5, 0)
    full, light = forward(params, ids), forward(params, ids, keep_trace=False)
    np.testing.assert_array_equal(light.logits, full.logits)
    assert light.layers == () and len(full.layers) == 2
