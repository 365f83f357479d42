"""Acceptance item 7: state-dict round trips (.safetensors, .npz) are bit-exact, bad keys are reported by
name, and ``PLDRConfig.from_hf_config`` reads an HF ``PldrllmConfig`` config.json.

What "reproduces the v510-110m preset" means: every architectural number and the RoPE layout/precision
read from the HF config equal the preset.  Three switches differ by design because the preset describes the
native PyTorch v510 code and the HF config the HF code (spec §11): mask_mode ("additive" -1e9 vs HF eager
"finfo_min"), embed_scale_precision ("float32" sqrt(d) vs model dtype "exact") and init_scheme ("torch" vs
"hf").  With those three overridden the two configs are equal.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from core_support import model_params, token_ids

from pldr_ref import PLDRConfig, forward, init_params, with_fixed_g
from pldr_ref.checkpoint import load_state_dict, save_state_dict, state_dict
from pldr_ref.params import FIXED_G_KEY, param_shapes

CONFIGS = {
    "tiny": {},
    "v900": {"metric_learner": "v900", "A_dff_depth": 6},
    "no_bias": {"attn_bias": False, "glu_bias": False, "final_bias": False},
    "external_g": {"g_mode": "external", "metric_learner": "none"},
}

#: A config.json as HF ``PldrllmConfig().save_pretrained`` writes it (transformers a28acc8b field names).
HF_110M = {
    "architectures": ["PldrllmForCausalLM"],
    "model_type": "pldrllm",
    "vocab_size": 32000,
    "hidden_size": 896,
    "intermediate_size": 2389,
    "num_hidden_layers": 5,
    "num_attention_heads": 14,
    "hidden_act": "silu",
    "max_position_embeddings": 1024,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-06,
    "use_cache": True,
    "output_pldr_attentions": False,
    "pad_token_id": 0,
    "bos_token_id": 2,
    "eos_token_id": 3,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": True,
    "glu_bias": True,
    "final_bias": True,
    "reference_rope": True,
    "attention_dropout": 0.0,
    "head_dim": 64,
    "num_reslayerA": 8,
    "num_denseA": 2,
    "A_dff": 170,
    "custom_G_type": None,
    "cache_first_G": False,
    "torch_dtype": "float32",
    "transformers_version": "4.56.0",
}

ARCH_FIELDS = ("num_layers", "num_heads", "d_k", "d_model", "dff", "A_dff", "num_reslayerA", "num_denseA",
               "vocab_size", "max_seq_len", "rope_base", "eps_ln", "eps_adj", "mask_value", "attn_bias", "glu_bias",
               "final_bias", "metric_learner", "g_mode", "pad_id", "rope_layout", "rope_precision")
NATIVE_VS_HF = {"mask_mode": ("additive", "ideal"), "embed_scale_precision": ("float32", "exact"),
                "init_scheme": ("torch", "hf"),
                # issue 12: from_hf_config applies the hf-sdpa emulation profile (transformers 5.x default)
                "rope_table": ("auto", "float32"), "rope_arithmetic": ("auto", "float32"),
                "score_scale": ("exact", "reciprocal"), "masked_row": ("arithmetic", "zeros"),
                "pad_source": ("token", "attention_mask")}


def _params(name: str):
    cfg = PLDRConfig.preset("tiny", **CONFIGS[name])
    params = model_params(cfg, 4)
    if cfg.g_mode == "external":
        g = np.random.default_rng(4).standard_normal((cfg.num_layers, cfg.num_heads, cfg.d_k, cfg.d_k))
        params = with_fixed_g(params, g)
    return cfg, params


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_round_trip_is_bit_exact(tmp_path, name: str, suffix: str) -> None:
    cfg, params = _params(name)
    path = tmp_path / f"model{suffix}"
    save_state_dict(params, path)
    loaded = load_state_dict(path, cfg)
    assert list(loaded) == list(param_shapes(cfg))
    for key, arr in params.items():
        assert loaded[key].dtype == np.float64
        np.testing.assert_array_equal(loaded[key], arr, err_msg=key)
        assert loaded[key].tobytes() == arr.tobytes(), key  # bitwise, signed zeros included
    ids = token_ids(cfg, 2, 5, 0)
    np.testing.assert_array_equal(forward(loaded, ids).logits, forward(params, ids).logits)


def test_round_trip_from_mapping_and_float32_widening() -> None:
    cfg, params = _params("tiny")
    sd = state_dict(params)
    np.testing.assert_array_equal(load_state_dict(sd, cfg)["final_layer.weight"], params["final_layer.weight"])
    f32 = {k: v.astype(np.float32) for k, v in sd.items()}
    loaded = load_state_dict(f32, cfg)
    for k, v in f32.items():
        np.testing.assert_array_equal(loaded[k], v.astype(np.float64))


def test_state_dict_is_a_copy() -> None:
    _, params = _params("tiny")
    sd = state_dict(params)
    sd["final_layer.bias"][0] += 1.0
    assert params["final_layer.bias"][0] != sd["final_layer.bias"][0]


def test_misshaped_key_is_reported_by_name(tmp_path) -> None:
    cfg, params = _params("tiny")
    sd = state_dict(params)
    key = "decoder.dec_layers.1.mha1.plgatt_layer.pwlst"
    sd[key] = np.zeros((2, 8, 7))
    with pytest.raises(ValueError, match=r"'decoder\.dec_layers\.1\.mha1\.plgatt_layer\.pwlst' has shape "
                                         r"\(2, 8, 7\), expected \(2, 8, 8\)"):
        load_state_dict(sd, cfg)
    path = tmp_path / "bad.safetensors"
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, str(path))
    with pytest.raises(ValueError, match=r"plgatt_layer\.pwlst"):
        load_state_dict(path, cfg)


def test_missing_and_extra_keys_are_reported_by_name() -> None:
    cfg, params = _params("tiny")
    sd = state_dict(params)
    del sd["decoder.dec_layers.0.ffn.gluw3.bias"]
    with pytest.raises(ValueError, match=r"missing key 'decoder\.dec_layers\.0\.ffn\.gluw3\.bias'.*\(16,\)"):
        load_state_dict(sd, cfg)
    sd = state_dict(params)
    sd["decoder.unknown.weight"] = np.zeros(3)
    with pytest.raises(ValueError, match=r"unexpected key\(s\) \['decoder\.unknown\.weight'\]"):
        load_state_dict(sd, cfg)
    sd = state_dict(params)
    sd["final_layer.bias"] = np.arange(cfg.vocab_size)
    with pytest.raises(ValueError, match=r"'final_layer\.bias' has dtype int64; accepted: float16, bfloat16, float32"):
        load_state_dict(sd, cfg)


def test_hf_status_buffer_is_accepted() -> None:
    cfg, params = _params("external_g")
    sd = state_dict(params)
    sd["decoder.past_G_values_status"] = np.ones(cfg.num_layers, dtype=np.float32)
    np.testing.assert_array_equal(load_state_dict(sd, cfg)[FIXED_G_KEY], params[FIXED_G_KEY])


def test_pickled_npz_is_refused(tmp_path) -> None:
    cfg, _ = _params("tiny")
    path = tmp_path / "pickled.npz"
    np.savez(path, obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="pickled objects, which are refused"):
        load_state_dict(path, cfg)


def test_bad_suffix_and_missing_file(tmp_path) -> None:
    cfg, params = _params("tiny")
    with pytest.raises(ValueError, match="unsupported checkpoint suffix"):
        save_state_dict(params, tmp_path / "model.pt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_state_dict(tmp_path / "absent.safetensors", cfg)


# ------------------------------------------------------------------ HF config.json
def test_from_hf_config_reproduces_v510_110m(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_110M))
    hf = PLDRConfig.from_hf_config(path)
    preset = PLDRConfig.preset("v510-110m")
    for field in ARCH_FIELDS:
        assert getattr(hf, field) == getattr(preset, field), field
    for field, (native, hf_value) in NATIVE_VS_HF.items():
        assert (getattr(preset, field), getattr(hf, field)) == (native, hf_value), field
    native = {field: values[0] for field, values in NATIVE_VS_HF.items()}
    assert PLDRConfig.from_hf_config(tmp_path, **native) == preset  # a folder works too
    assert init_params(PLDRConfig.preset("tiny"), 0).config.d_model == 16


def test_from_hf_config_defaults_and_derived_fields() -> None:
    """Missing keys take the PldrllmConfig defaults; hidden_size / intermediate_size None are derived."""
    assert PLDRConfig.from_hf_config({}) == PLDRConfig.from_hf_config(HF_110M)
    derived = PLDRConfig.from_hf_config({"num_attention_heads": 3, "head_dim": 8, "hidden_size": None,
                                         "intermediate_size": None})
    assert (derived.d_model, derived.dff) == (24, 64)  # floor(24 * 4 * 2 / 3) = 64
    half = PLDRConfig.from_hf_config({**HF_110M, "reference_rope": False})
    assert (half.rope_layout, half.rope_precision) == ("half", "float32")
    for g in ("identity", "random", "external"):
        fixed = PLDRConfig.from_hf_config({**HF_110M, "custom_G_type": g})
        assert (fixed.g_mode, fixed.metric_learner) == (g, "none")


@pytest.mark.parametrize(("change", "message"), [
    ({"model_type": "llama"}, "model_type='llama' is not 'pldrllm'"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu' is not supported"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings=True is not supported"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling=.* is not supported"),
    ({"hidden_size": 900}, r"head_dim=64 \* num_attention_heads=14 != hidden_size=900"),
    ({"custom_G_type": "learned"}, "custom_G_type='learned' is not one of"),
    ({"num_hidden_layers": 0}, r"PLDRConfig\.num_layers=0 must be a positive int"),
])
def test_from_hf_config_rejects_unsupported(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PLDRConfig.from_hf_config({**HF_110M, **change})


def test_negative_control_preset_differs_without_overrides() -> None:
    assert PLDRConfig.from_hf_config(HF_110M) != PLDRConfig.preset("v510-110m")
    assert PLDRConfig.from_hf_config({**HF_110M, "A_dff": 180}, mask_mode="additive", embed_scale_precision="float32",
                                     init_scheme="torch") != PLDRConfig.preset("v510-110m")


def test_init_params_is_deterministic() -> None:
    cfg = PLDRConfig.preset("tiny")
    a, b, c = init_params(cfg, 5), init_params(cfg, 5), init_params(cfg, 6)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["final_layer.weight"], c["final_layer.weight"])
