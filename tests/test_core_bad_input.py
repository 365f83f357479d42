"""Acceptance item 8: every bad input raises a clear error whose message names the problem."""

from __future__ import annotations

import numpy as np
import pytest
from core_support import model_params

from pldr_ref import Params, PLDRConfig, forward, init_params, with_fixed_g
from pldr_ref.checkpoint import load_state_dict, state_dict

TINY = PLDRConfig.preset("tiny")
PARAMS = init_params(TINY, 0)
GOOD = np.array([[1, 2, 3]])


# ------------------------------------------------------------------ token ids
@pytest.mark.parametrize(("ids", "error", "message"), [
    (np.array([[1, 64, 2]]), ValueError, r"token id 64 at index \(0, 1\) is outside \[0, vocab_size=64\)"),
    (np.array([[1, 2], [-3, 4]]), ValueError, r"token id -3 at index \(1, 0\) is outside \[0, vocab_size=64\)"),
    (np.array([[1.0, 2.0]]), TypeError, "token_ids must be an integer array, got dtype float64"),
    (np.array([[True, False]]), TypeError, "token_ids must be an integer array, got dtype bool"),
    ([["a", "b"]], TypeError, "token_ids must be an integer array, got dtype <U1"),
    (np.array([1, 2, 3]), ValueError, r"token_ids must have rank 2 \[B, S\], got shape \(3,\)"),
    (np.ones((1, 2, 3), dtype=int), ValueError, r"token_ids must have rank 2 \[B, S\], got shape \(1, 2, 3\)"),
    (np.zeros((1, 0), dtype=int), ValueError, r"token_ids must be non-empty, got shape \(1, 0\)"),
    (np.ones((1, 65), dtype=int), ValueError, "sequence of length 65 at start position 0 exceeds max_seq_len=64"),
])
def test_bad_token_ids(ids, error, message: str) -> None:
    with pytest.raises(error, match=message):
        forward(PARAMS, ids)


def test_sequence_beyond_max_from_start_position() -> None:
    with pytest.raises(ValueError, match="sequence of length 3 at start position 62 exceeds max_seq_len=64"):
        forward(PARAMS, GOOD, start_pos=62)
    with pytest.raises(ValueError, match="start position must be >= 0, got -1"):
        forward(PARAMS, GOOD, start_pos=-1)
    assert forward(PARAMS, GOOD, start_pos=61).logits.shape == (1, 3, 64)  # the boundary is legal


def test_params_must_be_params() -> None:
    with pytest.raises(TypeError, match=r"params must be a pldr_ref\.Params, got dict"):
        forward(dict(PARAMS), GOOD)


@pytest.mark.parametrize(("mask", "error", "message"), [
    (np.ones((1, 4)), ValueError, r"attention_mask has shape \(1, 4\), expected \(1, 3\)"),
    (np.ones((1, 3)), TypeError, "attention_mask must be bool or integer 0/1, got dtype float64"),
    (np.array([[1, 2, 1]]), ValueError, "attention_mask must contain only 0 and 1"),
])
def test_bad_attention_mask(mask, error, message: str) -> None:
    with pytest.raises(error, match=message):
        forward(PARAMS, GOOD, attention_mask=mask)


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_parameter(bad: float) -> None:
    w = np.array(PARAMS["decoder.dec_layers.0.mha1.wq.weight"])
    w[3, 5] = bad
    with pytest.raises(ValueError, match=rf"parameter 'decoder\.dec_layers\.0\.mha1\.wq\.weight' has a non-finite "
                                         rf"value {bad} at index \(3, 5\)"):
        PARAMS.replace(**{"decoder.dec_layers.0.mha1.wq.weight": w})
    sd = state_dict(PARAMS)
    sd["decoder.dec_layers.0.mha1.wq.weight"] = w
    with pytest.raises(ValueError, match="non-finite value"):
        load_state_dict(sd, TINY)


def test_params_missing_extra_misshaped() -> None:
    sd = state_dict(PARAMS)
    del sd["final_layer.bias"]
    with pytest.raises(ValueError, match=r"missing parameter\(s\) for this config: \['final_layer\.bias'\]"):
        Params(TINY, sd)
    with pytest.raises(ValueError, match=r"unexpected parameter\(s\) for this config: \['extra'\]"):
        Params(TINY, {**state_dict(PARAMS), "extra": np.zeros(1)})
    with pytest.raises(ValueError, match=r"parameter 'final_layer\.bias' has shape \(3,\), expected \(64,\)"):
        Params(TINY, {**state_dict(PARAMS), "final_layer.bias": np.zeros(3)})
    with pytest.raises(KeyError, match="unknown parameter 'nope'"):
        PARAMS.replace(nope=np.zeros(1))
    with pytest.raises(ValueError, match="seed must be a non-negative int, got -1"):
        init_params(TINY, -1)


def test_params_are_read_only() -> None:
    with pytest.raises(ValueError, match="read-only"):
        PARAMS["final_layer.bias"][0] = 1.0


# ------------------------------------------------------------------ external G
EXTERNAL = PLDRConfig.preset("tiny", g_mode="external", metric_learner="none")
EXT_PARAMS = init_params(EXTERNAL, 0)
G_SHAPE = (EXTERNAL.num_layers, EXTERNAL.num_heads, EXTERNAL.d_k, EXTERNAL.d_k)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_external_g(bad: float) -> None:
    g = np.zeros(G_SHAPE)
    g[1, 0, 2, 3] = bad
    with pytest.raises(ValueError, match="external G_LM contains NaN or inf"):
        with_fixed_g(EXT_PARAMS, g)


def test_bad_external_g() -> None:
    with pytest.raises(ValueError, match=r"external G_LM has shape \(2, 2, 8\), expected \(2, 2, 8, 8\)"):
        with_fixed_g(EXT_PARAMS, np.zeros(G_SHAPE[:-1]))
    with pytest.raises(ValueError, match="external G_LM must be a float array, got dtype int64"):
        with_fixed_g(EXT_PARAMS, np.zeros(G_SHAPE, dtype=np.int64))
    with pytest.raises(ValueError, match=r"with_fixed_g needs g_mode in .* config has g_mode='learned'"):
        with_fixed_g(PARAMS, np.zeros(G_SHAPE))
    g = np.random.default_rng(0).standard_normal(G_SHAPE).astype(np.float32)
    fixed = with_fixed_g(EXT_PARAMS, g[:, None])  # [L, 1, H, d, d] (the HF buffer slice) is accepted
    np.testing.assert_array_equal(fixed.layer(1).g_fixed, g[1].astype(np.float64))


# ------------------------------------------------------------------ config fields
@pytest.mark.parametrize(("fields", "message"), [
    ({"rope_layout": "gptj"}, r"PLDRConfig\.rope_layout='gptj' is not one of \('interleaved', 'half'\)"),
    ({"rope_precision": "float16"}, r"PLDRConfig\.rope_precision='float16' is not one of"),
    ({"mask_mode": "neg1e9"}, r"PLDRConfig\.mask_mode='neg1e9' is not one of"),
    ({"embed_scale_precision": "bf16"}, r"PLDRConfig\.embed_scale_precision='bf16' is not one of"),
    ({"metric_learner": "v600"}, r"PLDRConfig\.metric_learner='v600' is not one of"),
    ({"g_mode": "zeros"}, r"PLDRConfig\.g_mode='zeros' is not one of"),
    ({"gram_mode": "causal"}, r"PLDRConfig\.gram_mode='causal' is not one of"),
    ({"init_scheme": "jax"}, r"PLDRConfig\.init_scheme='jax' is not one of"),
    ({"num_heads": 0}, r"PLDRConfig\.num_heads=0 must be a positive int"),
    ({"d_k": 7}, r"PLDRConfig\.d_k=7 must be even"),
    ({"num_layers": True}, r"PLDRConfig\.num_layers=True must be an int \(not bool"),
    ({"vocab_size": 2.5}, r"PLDRConfig\.vocab_size=2\.5 must be an int \(not bool"),
    ({"A_dff": -1}, r"PLDRConfig\.A_dff=-1 must be a non-negative int"),
    ({"A_dff": 0}, r"PLDRConfig\.num_denseA and PLDRConfig\.A_dff must be positive"),
    ({"metric_learner": "v900"}, r"PLDRConfig\.A_dff_depth must be positive for metric_learner='v900'"),
    ({"metric_learner": "none"}, r"PLDRConfig\.metric_learner='none' needs a non-learned g_mode"),
    ({"eps_ln": -1e-6}, r"PLDRConfig\.eps_ln=-1e-06 must be a finite float >= 0"),
    ({"eps_adj": float("nan")}, r"PLDRConfig\.eps_adj=nan must be finite"),
    ({"rope_base": 1.0}, r"PLDRConfig\.rope_base=1\.0 must be > 1"),
    ({"mask_value": 1e9}, r"PLDRConfig\.mask_value=1000000000\.0 must be negative"),
    ({"mask_value": -float("inf")}, r"PLDRConfig\.mask_value=-inf must be finite"),
    ({"pad_id": 64}, r"PLDRConfig\.pad_id=64 must be < vocab_size=64"),
])
def test_bad_config_field(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PLDRConfig.preset("tiny", **fields)


def test_bad_config_names() -> None:
    with pytest.raises(ValueError, match=r"unknown preset 'v999'; available: \["):
        PLDRConfig.preset("v999")
    with pytest.raises(ValueError, match=r"PLDRConfig has no field\(s\) \['heads'\]"):
        TINY.replace(heads=3)
    with pytest.raises(ValueError, match=r"PLDRConfig has no field\(s\) \['heads'\]"):
        PLDRConfig.from_dict({**TINY.to_dict(), "heads": 3})
    assert PLDRConfig.from_dict(TINY.to_dict()) == TINY


# ------------------------------------------------------------------ non-finite intermediates
def test_overflowing_potential_tensor_is_reported_by_stage() -> None:
    """A_LM at eps_adj with a very negative learned power overflows A_P: the stage is named, no silent inf."""
    params = model_params(TINY, 0)
    p = "decoder.dec_layers.0.mha1.plgatt_layer."
    shape = params[p + "pwlst"].shape
    bad = params.replace(**{p + "blst": np.full(shape, -1e4), p + "pwlst": np.full(shape, -40.0)})
    with pytest.raises(FloatingPointError, match=r"stage 'layers\.0\.A_P' produced 0 NaN and \d+ inf values"):
        forward(bad, GOOD)
    out = forward(bad, GOOD, check_finite_values=False)  # the unchecked trace shows the documented overflow
    assert np.isinf(out.layers[0].A_P).any()
