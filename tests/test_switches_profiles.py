"""Issue 20, items 1, 2, 5 and 7: emulation profiles of runs that exist, profiles that set implementation switches
only, contradicting or ignored explicit inputs refused, and RoPE tables taken from framework arrays.

Each test fails on the code before issue 20 (a profile or helper that did not exist, a profile that changed the
architecture, an input that was silently ignored, a contradiction that was accepted).
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import model_params, rel_diff, token_ids

from pldr_ref import PLDRConfig, forward
from pldr_ref.config import EMULATIONS
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable, rope_angles

TINY = PLDRConfig.preset("tiny")


def _float32_table(cfg: PLDRConfig, moved: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The correctly rounded float32 table [max_seq_len, d_k/2], optionally with every 3rd entry one float32 ulp up
    (as a framework's not correctly rounded cos/sin kernel gives)."""
    pos = np.arange(cfg.max_seq_len)
    cos, sin = rope_angles(pos, cfg.d_k, cfg.rope_base, "float32")
    if moved:
        sel = (pos[:, None] + np.arange(cfg.d_k // 2)[None, :]) % 3 == 0
        up = np.float32(np.inf)
        cos, sin = np.where(sel, np.nextafter(cos, up), cos), np.where(sel, np.nextafter(sin, up), sin)
    return cos.astype(np.float32), sin.astype(np.float32)


def _with_config(params: Params, cfg: PLDRConfig) -> Params:
    """The same parameter values under other switches."""
    return Params(cfg, dict(params.items()))


# ----------------------------------------------------------------------------- item 1: PT-v510 profiles
def test_retired_pt_v510_profile_is_refused_naming_its_replacements() -> None:
    with pytest.raises(ValueError, match=r"retired.*cannot make.*'pt-v510-float32'.*'pt-v510-double'"):
        TINY.emulate("pt-v510")
    from pldr_ref.config import RETIRED_EMULATIONS

    assert "pt-v510" not in EMULATIONS and "pt-v510" in RETIRED_EMULATIONS


def test_pt_v510_float32_adds_the_mask_in_float32_so_a_leading_pad_row_is_uniform() -> None:
    cfg = TINY.emulate("pt-v510-float32")
    assert (cfg.mask_mode, cfg.mask_add_dtype, cfg.rope_arithmetic_dtype, cfg.score_scale, cfg.pad_id) == (
        "additive", "float32", "float32", "float32", 0)
    params = model_params(cfg, 3)
    ids = token_ids(cfg, 2, 6, 3)
    ids[0, 0] = 0  # a leading pad token: query row 0 has every key masked
    e = forward(params, ids).layers[0].E
    np.testing.assert_array_equal(e[0, :, 0], np.full((cfg.num_heads, 6), 1 / 6))  # -1e9 absorbs every score
    # negative control: adding -1e9 in float64 (what the retired profile did) keeps ~softmax(Sc), and moves logits
    f64 = _with_config(params, cfg.replace(mask_add_dtype="float64"))
    e64 = forward(f64, ids).layers[0].E
    assert rel_diff(e64[0, :, 0], e[0, :, 0]) > 1e-2
    assert rel_diff(forward(f64, ids).logits[0], forward(params, ids).logits[0]) > 1e-2


def test_pt_v510_double_needs_torchtunes_table_and_rotates_in_float64() -> None:
    cfg = TINY.emulate("pt-v510-double")
    assert (cfg.rope_table, cfg.rope_arithmetic, cfg.mask_add_dtype, cfg.softmax_precision) == (
        "explicit", "float64_qk_f32", "float64", "float64")
    params = model_params(cfg, 4)
    ids = token_ids(cfg, 1, 5, 4)
    with pytest.raises(ValueError, match="needs a RopeTable"):
        forward(params, ids)
    cos, sin = _float32_table(cfg, moved=True)
    cache = np.stack([cos, sin], axis=-1)  # torchtune's cache layout [P, d_k/2, 2]
    out = forward(params, ids, rope_table=RopeTable.from_torchtune_cache(cache))
    layer = out.layers[0]
    # position 1, pair 0: q rounded to float32, rotated in float64 with the given (moved) table values
    q = layer.q[0, :, 1].astype(np.float32).astype(np.float64)
    c, s = float(cos[1, 0]), float(sin[1, 0])
    np.testing.assert_array_equal(layer.q_rot[0, :, 1, 0], q[:, 0] * c - q[:, 1] * s)
    # the recipe without torchtune's table (the correctly rounded one) is off far beyond float64 rounding
    plain = forward(_with_config(params, cfg.replace(rope_table="float32")), ids).logits
    assert rel_diff(plain, out.logits) > 1e-10


# ----------------------------------------------------------------------------- item 2: what the config determines
@pytest.mark.parametrize("profile", ["hf-sdpa", "hf-eager", "hf-double-cast"])
def test_hf_profiles_keep_the_configs_rope_layout(profile: str) -> None:
    half = PLDRConfig.from_hf_config({"reference_rope": False, "num_hidden_layers": 1, "vocab_size": 64,
                                      "num_attention_heads": 2, "head_dim": 8, "hidden_size": 16})
    assert half.rope_layout == "half"
    got = half.emulate(profile)
    assert got.rope_layout == "half"
    assert got.rope_arithmetic_dtype == "float64"  # HF PldrllmRotaryEmbedding: q, k not rounded, even after .double()
    inter = PLDRConfig.from_hf_config({"num_hidden_layers": 1}).emulate(profile)
    assert inter.rope_layout == "interleaved"
    assert inter.rope_arithmetic == EMULATIONS[profile]["rope_arithmetic"]
    assert "rope_layout" not in EMULATIONS[profile]


def test_hf_double_cast_on_a_half_config_computes_the_half_model() -> None:
    half = PLDRConfig.from_hf_config({"reference_rope": False, "num_hidden_layers": 1, "vocab_size": 64,
                                      "num_attention_heads": 2, "head_dim": 8, "hidden_size": 16, "A_dff": 10,
                                      "num_reslayerA": 1, "intermediate_size": 24, "max_position_embeddings": 16})
    params = model_params(half, 5)
    ids = token_ids(half, 1, 6, 5)
    want = forward(params, ids).logits
    got = forward(_with_config(params, half.emulate("hf-double-cast")), ids).logits
    np.testing.assert_array_equal(got, want)  # sdpa and .double() differ by nothing on the half path
    # negative control: the interleaved pairing is a different architecture
    other = forward(_with_config(params, half.replace(rope_layout="interleaved")), ids).logits
    assert rel_diff(other, want) > 1e-3


# ----------------------------------------------------------------------------- item 5: one switch per behaviour
def test_a_rope_table_given_under_another_table_source_is_refused() -> None:
    params = model_params(TINY, 6)
    ids = token_ids(TINY, 1, 5, 6)
    zeros = RopeTable(np.zeros((TINY.max_seq_len, TINY.d_k // 2)), np.zeros((TINY.max_seq_len, TINY.d_k // 2)))
    with pytest.raises(ValueError, match=r"RopeTable was given but the RoPE table source is 'exact'.*ignored"):
        forward(params, ids, rope_table=zeros)
    from pldr_ref.inference.generation import generate
    from pldr_ref.inference.step import cached_forward

    with pytest.raises(ValueError, match="RopeTable was given"):
        cached_forward(params, ids, rope_table=zeros)
    with pytest.raises(ValueError, match="RopeTable was given"):
        generate(params, ids, 2, rope_table=zeros)
    # with rope_table="explicit" the same table is used (all-zero cos/sin zero q_rot and k_rot)
    out = forward(_with_config(params, TINY.replace(rope_table="explicit")), ids, rope_table=zeros)
    assert not np.any(out.layers[0].q_rot)


@pytest.mark.parametrize(("precision", "table"), [("exact", "float32"), ("float32", "exact")])
def test_rope_precision_contradicting_rope_table_is_refused(precision: str, table: str) -> None:
    with pytest.raises(ValueError, match=f"rope_table='{table}' contradicts rope_precision='{precision}'"):
        TINY.replace(rope_precision=precision, rope_table=table)
    # agreeing values, and sources the legacy switch does not name, are accepted
    assert TINY.replace(rope_precision=table, rope_table=table).rope_table_source == table
    assert TINY.replace(rope_precision=precision, rope_table="explicit").rope_table_source == "explicit"


# ----------------------------------------------------------------------------- item 7: tables and pad id
def test_tf_and_pt_profiles_pin_pad_id_zero() -> None:
    cfg = TINY.replace(pad_id=5)
    for profile in ("tf-v500", "tf-v900", "pt-v510-float32", "pt-v510-double"):
        extra = {"A_dff_depth": 6} if profile == "tf-v900" else {}
        assert cfg.emulate(profile, **extra).pad_id == 0, profile
    assert cfg.emulate("hf-sdpa").pad_id == 5  # HF reads pad_token_id from its config


def test_rope_table_from_torchtune_cache_and_rotate_half_arrays() -> None:
    cos, sin = _float32_table(TINY, moved=True)
    tt = RopeTable.from_torchtune_cache(np.stack([cos, sin], axis=-1))
    np.testing.assert_array_equal(tt.cos, cos.astype(np.float64))
    np.testing.assert_array_equal(tt.sin, sin.astype(np.float64))
    # HF PldrllmRotaryEmbedding / keras-nlp: [1, P, d_k] with cat(freqs, freqs)
    hf = RopeTable.from_rotate_half(np.concatenate([cos, cos], -1)[None], np.concatenate([sin, sin], -1)[None])
    np.testing.assert_array_equal(hf.cos, tt.cos)
    np.testing.assert_array_equal(hf.sin, tt.sin)
    # a float64 cache (torchtune after model.double()) gives the same table
    np.testing.assert_array_equal(RopeTable.from_torchtune_cache(np.stack([cos, sin], -1).astype(np.float64)).cos,
                                  tt.cos)


def test_rope_table_helpers_refuse_bad_arrays_with_clear_errors() -> None:
    cos, sin = _float32_table(TINY)
    with pytest.raises(ValueError, match=r"torchtune cache must be \[P, d_k/2, 2\]"):
        RopeTable.from_torchtune_cache(np.stack([cos, sin, cos], axis=-1))
    with pytest.raises(ValueError, match="torchtune cache must hold floats"):
        RopeTable.from_torchtune_cache(np.zeros((4, 2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match=r"two halves .* differ: not a rotate-half table"):
        RopeTable.from_rotate_half(np.concatenate([cos, sin], -1), np.concatenate([sin, sin], -1))
    with pytest.raises(ValueError, match="must be even"):
        RopeTable.from_rotate_half(cos[:, :3], sin[:, :3])
    with pytest.raises(ValueError, match=r"cos must be \[P, d_k\]"):
        RopeTable.from_rotate_half(np.zeros((2, 3, 4, 8)), np.zeros((2, 3, 4, 8)))
    with pytest.raises(ValueError, match="differ in shape"):
        RopeTable.from_rotate_half(np.zeros((4, 8)), np.zeros((5, 8)))
    with pytest.raises(ValueError, match="contains NaN or inf"):
        RopeTable.from_torchtune_cache(np.full((4, 2, 2), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match="must hold floats"):
        RopeTable(np.array([["a"]]), np.array([["b"]]))


def test_docs_no_longer_claim_tf_tables_are_the_same_float32_roundings() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "equations.md").read_text(encoding="utf-8")
    assert "same sequence of float32 roundings" not in text
    assert "not correctly rounded" in text and "RopeTable.from_rotate_half" in text


@pytest.mark.torch
def test_rope_table_helpers_take_torch_tensors_as_they_are() -> None:
    torch = pytest.importorskip("torch", reason="framework arrays as they come")
    d_k, p = TINY.d_k, TINY.max_seq_len
    theta = 1.0 / (10000 ** (torch.arange(0, d_k, 2)[: d_k // 2].float() / d_k))  # torchtune rope_init
    idx = torch.einsum("i,j->ij", torch.arange(p, dtype=theta.dtype), theta).float()
    cache = torch.stack([torch.cos(idx), torch.sin(idx)], dim=-1)  # torchtune build_rope_cache
    tt = RopeTable.from_torchtune_cache(cache)
    np.testing.assert_array_equal(tt.cos, torch.cos(idx).double().numpy())
    np.testing.assert_array_equal(RopeTable.from_torchtune_cache(cache.double()).sin, tt.sin)  # after .double()
    emb = torch.cat((idx, idx), dim=-1)[None]  # HF PldrllmRotaryEmbedding: [1, P, d_k]
    hf = RopeTable.from_rotate_half(emb.cos(), emb.sin())
    np.testing.assert_array_equal(hf.cos, tt.cos)
    np.testing.assert_array_equal(hf.sin, tt.sin)
    # pt-v510-double with torch's table: q_rot is torchtune's forward after model.double(), bit for bit
    cfg = TINY.emulate("pt-v510-double")
    params = model_params(cfg, 7)
    ids = token_ids(cfg, 1, 6, 7)
    layer = forward(params, ids, rope_table=tt).layers[0]
    x = torch.from_numpy(layer.q).float().reshape(*layer.q.shape[:-1], -1, 2)  # x.float()
    c = cache.double()[: ids.shape[1]].view(1, 1, ids.shape[1], d_k // 2, 2)  # the float64 buffer
    want = torch.stack([x[..., 0] * c[..., 0] - x[..., 1] * c[..., 1],
                        x[..., 1] * c[..., 0] + x[..., 0] * c[..., 1]], -1).flatten(-2)
    np.testing.assert_array_equal(layer.q_rot, want.numpy())
