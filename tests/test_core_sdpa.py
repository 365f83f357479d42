"""Acceptance item 1 (Theorem 5.4(i)): with G_LM = I the model is a standard post-norm RoPE/SwiGLU
transformer with scaled dot-product attention.

The SDPA transformer below is written from the spec (§2) with its own arithmetic (einsum projections,
complex-number RoPE, scipy softmax) and uses no pldr_ref stage function.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from core_support import config_from_shape, model_params, rel_diff, shapes, token_ids
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import expit, softmax

from pldr_ref import forward

SDPA_RTOL = 1e-13


def _ln(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _dense(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    y = np.einsum("...i,oi->...o", x, w)
    return y if b is None else y + b


def _rope_complex(x: np.ndarray, positions: np.ndarray, layout: str, base: float) -> np.ndarray:
    """x [B, S, H, d_k] rotated by multiplying each pair, read as a complex number, by e^{i p omega}."""
    dk = x.shape[-1]
    omega = 1.0 / base ** (np.arange(dk // 2) * 2.0 / dk)
    rot = np.exp(1j * positions[None, :, None, None] * omega)
    if layout == "interleaved":
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * rot
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = z.real, z.imag
        return out
    z = (x[..., : dk // 2] + 1j * x[..., dk // 2 :]) * rot
    return np.concatenate([z.real, z.imag], axis=-1)


def sdpa_transformer(tensors, cfg, ids: np.ndarray, *, scale_scores: bool = True) -> np.ndarray:
    """Logits of a post-norm transformer with SDPA, RoPE on q/k, SwiGLU FFN (spec §2 with G = I)."""
    b, s = ids.shape
    h, dk = cfg.num_heads, cfg.d_k
    d = h * dk
    pos = np.arange(s, dtype=np.float64)
    x = tensors["decoder.embedding.weight"][ids] * math.sqrt(d)
    x = _ln(x, tensors["decoder.layernorm1.weight"], tensors["decoder.layernorm1.bias"], cfg.eps_ln)
    future = np.triu(np.ones((s, s), dtype=bool), k=1)
    for layer in range(cfg.num_layers):
        p = f"decoder.dec_layers.{layer}."

        def proj(name: str, inp: np.ndarray, p: str = p) -> np.ndarray:
            return _dense(inp, tensors[f"{p}mha1.{name}.weight"], tensors.get(f"{p}mha1.{name}.bias"))

        q = proj("wq", x).reshape(b, s, h, dk)
        k = proj("wk", x).reshape(b, s, h, dk)
        v = proj("wv", x).reshape(b, s, h, dk)
        q = _rope_complex(q, pos, cfg.rope_layout, cfg.rope_base)
        k = _rope_complex(k, pos, cfg.rope_layout, cfg.rope_base)
        sc = np.einsum("bshd,bthd->bhst", q, k)
        if scale_scores:
            sc = sc / math.sqrt(dk)
        sc = np.where(future, -np.inf, sc)
        att = softmax(sc, axis=-1)
        ctx = np.einsum("bhst,bthd->bshd", att, v).reshape(b, s, d)
        y = proj("dense", ctx)
        o1 = _ln(y + x, tensors[f"{p}layernorm1.weight"], tensors[f"{p}layernorm1.bias"], cfg.eps_ln)

        def ffn(name: str, inp: np.ndarray, p: str = p) -> np.ndarray:
            return _dense(inp, tensors[f"{p}ffn.{name}.weight"], tensors.get(f"{p}ffn.{name}.bias"))

        z1 = ffn("gluw1", o1)
        f = ffn("gluw3", z1 * expit(z1) * ffn("gluw2", o1))
        x = _ln(f + o1, tensors[f"{p}layernorm2.weight"], tensors[f"{p}layernorm2.bias"], cfg.eps_ln)
    return _dense(x, tensors["final_layer.weight"], tensors.get("final_layer.bias"))


@pytest.mark.parametrize("metric_learner", ["none", "v500"])
@given(shape=shapes(), layout=st.sampled_from(["interleaved", "half"]), seed=st.integers(0, 2**16))
def test_identity_g_is_sdpa(metric_learner: str, shape: dict, layout: str, seed: int) -> None:
    """g_mode="identity" == independent SDPA transformer (<= 1e-13 relative on the logits)."""
    cfg = config_from_shape(shape, g_mode="identity", metric_learner=metric_learner, rope_layout=layout)
    params = model_params(cfg, seed)
    ids = token_ids(cfg, shape["batch"], shape["seq"], seed)
    out = forward(params, ids)
    if metric_learner == "v500":  # the metric learner runs, and its output is ignored
        assert out.layers[0].A is not None and out.layers[0].A_LM is None
    ref = sdpa_transformer(params, cfg, ids)
    assert rel_diff(out.logits, ref) <= SDPA_RTOL


def test_identity_g_is_sdpa_at_width_64() -> None:
    """The released head size d_k = 64 (two heads, 12 positions) at the same tolerance."""
    cfg = config_from_shape({"num_heads": 2, "d_k": 64, "num_layers": 2}, g_mode="identity",
                            metric_learner="v500")
    params = model_params(cfg, 3)
    ids = token_ids(cfg, 2, 12, 3)
    assert rel_diff(forward(params, ids).logits, sdpa_transformer(params, cfg, ids)) <= SDPA_RTOL


# ------------------------------------------------------------------ negative controls
def test_negative_control_random_g_is_not_sdpa() -> None:
    """A G that is not the identity is caught by the same comparison."""
    cfg = config_from_shape({"num_heads": 2, "d_k": 4, "num_layers": 1}, g_mode="random", metric_learner="none")
    params = model_params(cfg, 0)
    ids = token_ids(cfg, 1, 5, 0)
    assert rel_diff(forward(params, ids).logits, sdpa_transformer(params, cfg, ids)) > 1e-3


def test_negative_control_reference_is_sensitive() -> None:
    """The reference itself detects a dropped 1/sqrt(d_k) and a wrong RoPE layout."""
    cfg = config_from_shape({"num_heads": 2, "d_k": 4, "num_layers": 1}, g_mode="identity", metric_learner="none")
    params = model_params(cfg, 0)
    ids = token_ids(cfg, 1, 5, 0)
    logits = forward(params, ids).logits
    assert rel_diff(logits, sdpa_transformer(params, cfg, ids, scale_scores=False)) > 1e-6
    assert rel_diff(logits, sdpa_transformer(params, cfg.replace(rope_layout="half"), ids)) > 1e-6
