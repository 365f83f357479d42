"""Issue 20, items 3 and 6: HF ``generate`` positions by transformers version, the ready ``hf-generate`` modes
(with ``cache_first_G``), and ``check_finite_values`` in ``prefill`` / ``advance`` / ``generate``.

transformers 4.x ``prepare_inputs_for_generation`` fills padding positions with 1; 5.x
``_prepare_position_ids_for_generation`` with 0 (the current release; the version-less names are deprecated).
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import model_params, rel_diff, token_ids

from pldr_ref import PLDRConfig
from pldr_ref.inference import modes
from pldr_ref.inference.generation import generate
from pldr_ref.inference.modes import InferenceMode, advance, hf_position_ids, prefill, resolve_mode

TINY = PLDRConfig.preset("tiny")


def _left_padded(cfg: PLDRConfig, seed: int) -> tuple[object, np.ndarray, np.ndarray]:
    params = model_params(cfg, seed)
    prompt = token_ids(cfg, 2, 5, seed)
    mask = np.ones((2, 5), dtype=np.int64)
    mask[0, :2] = 0
    prompt[0, :2] = cfg.pad_id
    return params, prompt, mask


# ----------------------------------------------------------------------------- item 3
def test_hf_position_ids_follow_the_named_transformers_version() -> None:
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert modes.HF_CURRENT_TRANSFORMERS == "5.x"
    np.testing.assert_array_equal(hf_position_ids(mask, "5.x"), [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
    np.testing.assert_array_equal(hf_position_ids(mask, "4.x"), [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]])
    with pytest.raises(ValueError, match=r"transformers='6\.x' is not one of"):
        hf_position_ids(mask, "6.x")


def test_hf_generate_modes_are_named_by_version_and_default_to_the_current_release() -> None:
    assert resolve_mode("hf-generate-4.x").hf_positions == "4.x"
    assert resolve_mode("hf-generate-5.x").hf_positions == "5.x"
    first = resolve_mode("hf-generate-5.x-first-G")
    assert first.cache_first_G and first.hf_positions == "5.x" and first.cached_mask == "causal"
    assert resolve_mode("hf-generate-4.x-first-G").cache_first_G
    assert resolve_mode("hf-first-G").cache_first_G and resolve_mode("hf-first-G").hf_positions is None
    assert set(modes.HF_MODES) >= {"hf", "hf-first-G", "hf-generate-5.x", "hf-generate-5.x-first-G"}
    with pytest.raises(ValueError, match=r"unknown inference mode 'hf-generate-3\.x'"):
        resolve_mode("hf-generate-3.x")
    with pytest.raises(ValueError, match="hf_positions must be None or a transformers version"):
        InferenceMode("x", kv_cache=True, g_cache=True, hf_positions="7")


def test_left_padded_generation_differs_between_transformers_4_and_5() -> None:
    cfg = TINY.emulate("hf-sdpa")
    params, prompt, mask = _left_padded(cfg, 10)
    v5 = generate(params, prompt, 3, mode="hf-generate-5.x", attention_mask=mask, return_traces=True)
    v4 = generate(params, prompt, 3, mode="hf-generate-4.x", attention_mask=mask, return_traces=True)
    np.testing.assert_array_equal(v5.traces[0].positions, [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
    np.testing.assert_array_equal(v4.traces[0].positions, [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]])
    # real tokens sit at the same positions in both; the pads' positions enter the global Gram of the padded row
    assert [t.positions.tolist() for t in v5.traces[1:]] == [[[3], [5]], [[4], [6]]]
    assert rel_diff(v4.step_logits[:, 0], v5.step_logits[:, 0]) > 1e-3
    np.testing.assert_array_equal(v4.step_logits[:, 1], v5.step_logits[:, 1])  # the unpadded row: identical


def test_hf_generate_first_g_freezes_sample_zeros_operators() -> None:
    cfg = TINY.emulate("hf-sdpa")
    params, prompt, mask = _left_padded(cfg, 11)
    _, state = prefill(params, prompt, "hf-generate-5.x-first-G", attention_mask=mask)
    per_sample = prefill(params, prompt, "hf-generate-5.x", attention_mask=mask)[1].g_cache
    g0 = state.g_cache.layers[0].G_LM
    assert g0.shape[0] == 1
    np.testing.assert_array_equal(g0[0], per_sample.layers[0].G_LM[0])
    assert rel_diff(per_sample.layers[0].G_LM[1], g0[0]) > 1e-3  # sample 1 differs: the flag matters
    res = generate(params, prompt, 2, mode="hf-generate-5.x-first-G", attention_mask=mask)
    plain = generate(params, prompt, 2, mode="hf-generate-5.x", attention_mask=mask)
    np.testing.assert_array_equal(res.step_logits[0], plain.step_logits[0])  # same prompt pass
    assert rel_diff(res.step_logits[1, 1], plain.step_logits[1, 1]) > 1e-6  # row 1 steps use sample 0's G


# ----------------------------------------------------------------------------- item 6
def test_hf_eager_left_padding_returns_nan_logits_when_asked() -> None:
    cfg = TINY.emulate("hf-eager")
    params, prompt, mask = _left_padded(cfg, 12)
    with pytest.raises(FloatingPointError):
        prefill(params, prompt, "hf", attention_mask=mask)
    step, state = prefill(params, prompt, "hf", attention_mask=mask, check_finite_values=False)
    assert np.isnan(step.logits[0]).all() and np.isfinite(step.logits[1]).all()
    new = np.array([[5], [6]])
    logits, _, _ = advance(params, state, new, "hf")  # the state's setting carries over
    assert np.isnan(logits[0]).all() and np.isfinite(logits[1]).all()
    with pytest.raises(FloatingPointError):
        advance(params, state, new, "hf", check_finite_values=True)
    with pytest.raises(FloatingPointError):
        generate(params, prompt, 2, mode="hf", attention_mask=mask)
    res = generate(params, prompt, 2, mode="hf", attention_mask=mask, check_finite_values=False)
    assert np.isnan(res.step_logits[:, 0]).all() and np.isfinite(res.step_logits[:, 1]).all()
    # without padding nothing is NaN and the option changes nothing
    full = np.ones_like(mask)
    a = generate(params, prompt, 2, mode="hf", attention_mask=full)
    b = generate(params, prompt, 2, mode="hf", attention_mask=full, check_finite_values=False)
    np.testing.assert_array_equal(a.step_logits, b.step_logits)
