"""Issue 29, causes 17-19: one API for every entry point that runs the model.

17. ``pldr_ref.exact.forward`` refuses a ``rope_table`` the config does not use, as the float64 tier does.
18. Every public entry point that runs the model takes forward's explicit inputs (``rope_table``,
    ``softmax_kernel``, ``attention_mask``, ``position_ids``, ``check_finite_values``): an HF-replay config goes
    through each and matches :func:`pldr_ref.forward`.
19. Names removed or re-meant (``HF_PAD_POSITION``, mode ``hf-generate``) keep their old meaning for one version
    with a ``DeprecationWarning`` that names what to use.
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import model_params, token_ids

import pldr_ref
from pldr_ref import PLDRConfig
from pldr_ref.exact import forward as exact_forward
from pldr_ref.rope import RopeTable

TINY = PLDRConfig.preset("tiny")


def _table(config: PLDRConfig, positions: int) -> RopeTable:
    """A RopeTable of the config's d_k, built here from the RoPE formula (not by the code under test)."""
    half = config.d_k // 2
    theta = np.arange(positions)[:, None] * config.rope_base ** (-2.0 * np.arange(half)[None, :] / config.d_k)
    return RopeTable(np.cos(theta), np.sin(theta))


# ----------------------------------------------------------------------------- cause 17
def test_exact_forward_refuses_a_rope_table_the_config_ignores() -> None:
    cfg = PLDRConfig.preset("tiny", num_layers=1)
    params = model_params(cfg, 3)
    ids = token_ids(cfg, 1, 3, 3)
    table = _table(cfg, cfg.max_seq_len)
    assert cfg.rope_table_source != "explicit"
    with pytest.raises(ValueError, match="RopeTable was given but the RoPE table source is"):
        pldr_ref.forward(params, ids, rope_table=table)  # the float64 tier's promise
    with pytest.raises(ValueError, match="RopeTable was given but the RoPE table source is"):
        exact_forward(params, ids, rope_table=table, guard=False, dps=20)
    with pytest.raises(ValueError, match="RopeTable was given"):
        exact_forward(params, ids, rope_table=table, engine="arb")
    # negative control: with rope_table="explicit" the same table is used, and the exact tier agrees with float64
    explicit = PLDRConfig.preset("tiny", num_layers=1, rope_table="explicit")
    p2 = model_params(explicit, 3)
    got = exact_forward(p2, ids, rope_table=table, guard=False, dps=20)["logits"]
    want = pldr_ref.forward(p2, ids, rope_table=table).logits
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="needs a RopeTable"):
        exact_forward(p2, ids, guard=False, dps=20)
    with pytest.raises(TypeError, match=r"must be a pldr_ref\.rope\.RopeTable"):
        exact_forward(p2, ids, rope_table=(table.cos, table.sin), guard=False, dps=20)


# ----------------------------------------------------------------------------- cause 19
def _left_padded_prompt(cfg: PLDRConfig, seed: int) -> tuple[object, np.ndarray, np.ndarray]:
    params = model_params(cfg, seed)
    prompt = token_ids(cfg, 2, 5, seed)
    mask = np.ones((2, 5), dtype=np.int64)
    mask[0, :2] = 0
    prompt[0, :2] = cfg.pad_id
    return params, prompt, mask


def test_hf_pad_position_and_generate_mode_keep_their_old_meaning_with_a_warning() -> None:
    from pldr_ref.inference import modes
    from pldr_ref.inference.generation import generate

    with pytest.warns(DeprecationWarning, match=r"HF_PAD_POSITION is deprecated.*use HF_PAD_POSITIONS\['4\.x'\]"):
        assert modes.HF_PAD_POSITION == 1  # the transformers 4.x pad position, as before the versions were named
    with pytest.warns(DeprecationWarning, match="HF_GENERATE_MODE is deprecated"):
        assert modes.HF_GENERATE_MODE.hf_positions == "4.x"
    with pytest.warns(DeprecationWarning, match=r"hf_position_ids\(attention_mask\) without transformers="):
        np.testing.assert_array_equal(modes.hf_position_ids([[0, 0, 1, 1, 1]]), [[1, 1, 0, 1, 2]])
    with pytest.warns(DeprecationWarning, match=r"hf_positions=True\) is deprecated.*'4\.x' or '5\.x'"):
        assert modes.InferenceMode("x", kv_cache=True, g_cache=True, hf_positions=True).hf_positions == "4.x"
    cfg = TINY.emulate("hf-sdpa")
    params, prompt, mask = _left_padded_prompt(cfg, 10)
    with pytest.warns(DeprecationWarning, match=r"mode 'hf-generate' is deprecated.*use 'hf-generate-4\.x'"):
        old = generate(params, prompt, 2, mode="hf-generate", attention_mask=mask)
    v4 = generate(params, prompt, 2, mode="hf-generate-4.x", attention_mask=mask)
    v5 = generate(params, prompt, 2, mode="hf-generate-5.x", attention_mask=mask)
    np.testing.assert_array_equal(old.step_logits, v4.step_logits)  # the old meaning, bit for bit
    assert np.max(np.abs(old.step_logits[:, 0] - v5.step_logits[:, 0])) > 1e-6  # control: the rules differ here
    with pytest.warns(DeprecationWarning, match=r"'hf-generate-first-G' is deprecated.*'hf-generate-5\.x-first-G'"):
        assert modes.resolve_mode("hf-generate-first-G").hf_positions == "5.x"
    # the current names warn nothing; an unknown name and attribute are still errors
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        modes.resolve_mode("hf-generate-5.x")
        modes.hf_position_ids(mask, "5.x")
    with pytest.raises(AttributeError, match="HF_PAD_POSITIONZ"):
        modes.HF_PAD_POSITIONZ  # noqa: B018
    with pytest.raises(ValueError, match="unknown inference mode"):
        modes.resolve_mode("hf-generate-3.x")


def test_changelog_names_every_deprecated_name() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text(encoding="utf-8")
    for name in ("`HF_PAD_POSITION`", "`HF_GENERATE_MODE`", '`"hf-generate"`', '`"hf-generate-first-G"`',
                 "`hf_position_ids(mask)`", "`InferenceMode(hf_positions=True)`"):
        assert name in text, name
