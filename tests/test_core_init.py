"""Initialisers of spec §4 (``init_scheme`` = torch / keras / hf), including the PT-v510 wv quirk and the
Keras truncated glorot_normal with Keras fans, checked by bounds and sample moments at the released
head geometry (H = 14, d_k = 64)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pldr_ref import PLDRConfig, init_params

H, DK = 14, 64
D = H * DK
TRUNC_STD = 0.87962566103423978  # std of N(0, 1) truncated to [-2, 2]


def _params(scheme: str):
    cfg = PLDRConfig(num_layers=1, num_heads=H, d_k=DK, dff=64, A_dff=32, num_reslayerA=1, num_denseA=1,
                     vocab_size=512, max_seq_len=8, init_scheme=scheme)
    return init_params(cfg, 11)


P = "decoder.dec_layers.0."
PLGA = P + "mha1.plgatt_layer."


@pytest.fixture(scope="module")
def torch_params():
    return _params("torch")


@pytest.fixture(scope="module")
def keras_params():
    return _params("keras")


@pytest.fixture(scope="module")
def hf_params():
    return _params("hf")


def _uniform_bound_ok(x: np.ndarray, bound: float) -> bool:
    return float(np.max(np.abs(x))) <= bound and float(np.max(np.abs(x))) >= 0.99 * bound


def test_torch_scheme(torch_params) -> None:
    p = torch_params
    assert abs(np.std(p["decoder.embedding.weight"]) - 1.0) < 0.01  # nn.Embedding N(0, 1)
    for name in ("wq", "wk", "dense"):
        assert _uniform_bound_ok(p[f"{P}mha1.{name}.weight"], math.sqrt(6 / (2 * D)))  # xavier_uniform
        assert np.all(p[f"{P}mha1.{name}.bias"] == 0)
    # wv is never xavier-initialised in PT-v510 (spec §13.1): kaiming_uniform(a=sqrt 5) and U(+-1/sqrt(in)) bias
    assert _uniform_bound_ok(p[f"{P}mha1.wv.weight"], 1 / math.sqrt(D))
    assert _uniform_bound_ok(p[f"{P}mha1.wv.bias"], 1 / math.sqrt(D))
    # PLGA W, P, a: xavier_normal with torch fans fan_in = d_k^2, fan_out = H d_k
    std = math.sqrt(2 / (DK * DK + H * DK))
    assert abs(std - 0.0200) < 1e-4
    for name in ("Wlst", "pwlst", "alst"):
        assert abs(np.std(p[PLGA + name]) / std - 1) < 0.01
    for name in ("blst", "balst"):
        assert np.all(p[PLGA + name] == 0)


def test_keras_scheme(keras_params) -> None:
    p = keras_params
    emb = p["decoder.embedding.weight"]
    assert _uniform_bound_ok(emb, 0.05)
    for name in ("wq", "wk", "wv", "dense"):  # glorot_uniform everywhere, wv included
        assert _uniform_bound_ok(p[f"{P}mha1.{name}.weight"], math.sqrt(6 / (2 * D)))
        assert np.all(p[f"{P}mha1.{name}.bias"] == 0)
    # glorot_normal = truncated normal, Keras fans H d_k each: target std sqrt(1 / (H d_k)) = 0.0334
    target = math.sqrt(1 / (H * DK))
    assert abs(target - 0.0334) < 1e-4
    for name in ("Wlst", "pwlst", "alst"):
        x = p[PLGA + name]
        assert abs(np.std(x) / target - 1) < 0.01
        assert np.max(np.abs(x)) <= 2 * target / TRUNC_STD
        assert np.max(np.abs(x)) >= 0.99 * 2 * target / TRUNC_STD


def test_hf_scheme(hf_params) -> None:
    p = hf_params
    assert abs(np.std(p["decoder.embedding.weight"]) - 1.0) < 0.01
    assert _uniform_bound_ok(p[f"{P}mha1.wv.weight"], math.sqrt(6 / (2 * D)))
    assert np.all(p[f"{P}mha1.wv.bias"] == 0)
    bound = math.sqrt(6 / (DK * DK + H * DK))  # xavier_uniform with torch fans: 0.0347
    assert abs(bound - 0.0347) < 1e-4
    for name in ("Wlst", "pwlst", "alst"):
        assert _uniform_bound_ok(p[PLGA + name], bound)


@pytest.mark.parametrize("scheme", ["torch", "keras", "hf"])
def test_norms_start_at_identity(scheme: str) -> None:
    p = _params(scheme)
    for name, arr in p.items():
        if "norm" in name:
            assert np.all(arr == (1.0 if name.endswith("weight") else 0.0)), name


def test_negative_controls_schemes_are_distinguishable(torch_params, keras_params, hf_params) -> None:
    """Each check above rejects the other schemes' tensors."""
    assert not _uniform_bound_ok(hf_params[f"{P}mha1.wv.weight"], 1 / math.sqrt(D))  # xavier wv exceeds the quirk
    untruncated = np.random.default_rng(0).standard_normal(200_000) * math.sqrt(1 / (H * DK)) / TRUNC_STD
    assert np.max(np.abs(untruncated)) > 2 * math.sqrt(1 / (H * DK)) / TRUNC_STD
    assert abs(np.std(torch_params[PLGA + "Wlst"]) / math.sqrt(1 / (H * DK)) - 1) > 0.1
    assert not _uniform_bound_ok(keras_params["decoder.embedding.weight"], 1.0)
