"""The kernel cases of the committed suite (issue 19, item 2): long attention rows, real widths, mixed padding,
multi-token cached chunks, judgeable in bfloat16 and float16; a tiled online softmax that does not rescale across
64-key tiles is far off on them; parameter scales and the trained-G record regenerate exactly."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from pldr_ref import attention
from pldr_ref.fixtures.baselines import PRECISIONS, baseline_outputs, error_metrics
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.fixtures.runners import run_kind, stored_outputs
from pldr_ref.fixtures.suite import build_suite
from pldr_ref.fixtures.suite_kernels import LEARNED_SCALES, NARROW_LEARNED, kernel_cases
from pldr_ref.fixtures.weights import fixture_params, trained_g_from_record, trained_g_record
from pldr_ref.resources import trained_g_lm

KERNEL = [s.name for s in kernel_cases()]
MODEL_KERNEL = [s.name for s in kernel_cases() if s.kind == "forward"]
#: "Judgeable": the naive bfloat16 / float16 run of the reference moves the logits by at most this relative RMS
#: (forward cases: 1.25 %, so that 8 x that error, the harness's end-to-end bfloat16 RMS allowance, stays below its
#: 10 % judgeability limit; cached generation, judged per call: 2 %).
JUDGEABLE_RMS = {"forward": 0.0125, "cached_generation": 0.02}
#: A broken kernel must be off by more than these multiples of the naive bfloat16 / float16 run's error (measured:
#: 8-12 x and 70-95 x on the cases of LONG_ROWS).
BROKEN_FACTOR = {"bfloat16": 6.0, "float16": 40.0}
TILE = 64


@functools.cache
def _load(name: str):
    return load_case(DEFAULT_GOLDEN_DIR / name)


def _logit_names(case) -> list[str]:
    return [n for n in case.outputs if n == "logits" or n.endswith("logits")]


def test_kernel_cases_are_in_the_default_suite_and_cover_the_shapes_kernels_break_on():
    default = {s.name: s for s in build_suite("default")}
    assert set(KERNEL) <= set(default)
    specs = [default[n] for n in KERNEL]
    lengths = {s.name: s.inputs()["token_ids"].shape[1] for s in specs if s.kind == "forward"}
    assert len(lengths) >= 8
    assert sum(n >= 128 for n in lengths.values()) >= 2 and any(n >= 128 and n % 64 for n in lengths.values())
    real = [s for s in specs if s.config is not None and (s.config.num_heads, s.config.d_k) == (14, 64)]
    assert {s.kind for s in real} == {"forward", "cached_generation"}
    assert all(s.trained_g_layers for s in real)
    assert any(max(s.args["step_sizes"]) > 1 for s in specs if s.kind == "cached_generation")
    assert sum("padding" in s.tags for s in specs if s.kind == "forward") >= 3
    assert default["op/masked_softmax_long_rows"].inputs()["logits"].shape[-1] == 1024
    committed = json.loads((DEFAULT_GOLDEN_DIR / "MANIFEST.json").read_text())["cases"]
    assert set(KERNEL) <= set(committed)


@pytest.mark.parametrize("name", [n for n in KERNEL if not n.startswith("op/")])
def test_logits_are_judgeable_in_bfloat16_and_float16(name):
    """The naive run (case.json baselines, pldr_ref's own rounding) moves the logits by a few percent at most."""
    case = _load(name)
    for dtype in ("bfloat16", "float16"):
        for out in _logit_names(case):
            rms = case.baselines[dtype][out]["rms_rel"]
            assert rms is not None and rms <= JUDGEABLE_RMS[case.kind], (dtype, out, rms)


def test_negative_control_fixture_scale_exponents_are_not_judgeable():
    """Without the conditioning scale (P at the fixture's +-1/4) the learned-G long-row case moves by far more."""
    case = _load("model/rows_s257_learned_g")
    assert case.meta["params"]["scales"] == LEARNED_SCALES
    raw = fixture_params(NARROW_LEARNED, int(case.meta["params"]["seed"]))
    golden = run_kind("forward", raw.config, raw, case.args, case.inputs)
    naive = baseline_outputs("forward", raw, case.args, case.inputs, PRECISIONS["bfloat16"])
    assert error_metrics(naive["logits"], golden["logits"])["rms_rel"] > 4 * JUDGEABLE_RMS["forward"]


def online_softmax(logits: np.ndarray, *, rescale: bool, tile: int = TILE) -> np.ndarray:
    """Row softmax computed tile by tile over the keys with a running maximum m and running sum l (FlashAttention).
    ``rescale=True``: when m grows, the sum so far is multiplied by exp(m_old - m_new) (correct).
    ``rescale=False``: the broken kernel: the earlier tiles' sum keeps its old reference point."""
    x = np.asarray(logits, dtype=np.float64)
    m = np.full((*x.shape[:-1], 1), -np.inf)
    total = np.zeros((*x.shape[:-1], 1))
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, x.shape[-1], tile):
            block = x[..., start:start + tile]
            m_new = np.maximum(m, np.max(block, axis=-1, keepdims=True))
            ref = np.where(np.isfinite(m_new), m_new, 0.0)
            if rescale:
                total = total * np.where(np.isfinite(m), np.exp(m - ref), 0.0)
            total = total + np.sum(np.exp(block - ref), axis=-1, keepdims=True)
            m = m_new
        ref = np.where(np.isfinite(m), m, 0.0)
        return np.exp(x - ref) / np.where(total == 0, 1.0, total)


def _with_softmax(monkeypatch, rescale: bool) -> None:
    monkeypatch.setattr(attention, "masked_softmax",
                        lambda logits, *, overwrite_input=False: online_softmax(logits, rescale=rescale))


def _relative_rms(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


LONG_ROWS = ["model/rows_s257_learned_g", "model/rows_s160_random_g", "model/rows_s130_left_right_padding",
             "model/rows_s96_half_rope_additive_mask"]


@pytest.mark.parametrize("name", LONG_ROWS)
def test_online_softmax_without_rescaling_is_far_off_on_long_rows(name, monkeypatch):
    case = _load(name)
    _with_softmax(monkeypatch, rescale=True)  # control: the correct tiled kernel reproduces the golden logits
    good = run_kind(case.kind, case.config, case.params, case.args, case.inputs)["logits"]
    assert _relative_rms(good, case.outputs["logits"]) < 1e-12
    _with_softmax(monkeypatch, rescale=False)
    broken = run_kind(case.kind, case.config, case.params, case.args, case.inputs)["logits"]
    for dtype, factor in BROKEN_FACTOR.items():
        naive = case.baselines[dtype]["logits"]["rms_rel"]
        assert _relative_rms(broken, case.outputs["logits"]) > factor * naive, dtype


def test_online_softmax_without_rescaling_is_far_off_on_the_long_softmax_rows():
    case = _load("op/masked_softmax_long_rows")
    want = case.outputs["out"]
    assert _relative_rms(online_softmax(case.inputs["logits"], rescale=True), want) < 1e-12
    broken = online_softmax(case.inputs["logits"], rescale=False)
    per_row = np.linalg.norm(broken - want, axis=-1) / np.linalg.norm(want, axis=-1)
    assert np.all(per_row > 0.1), per_row  # every row: its maximum lies past the first tile
    assert np.all(np.abs(broken[3:, :] - want[3:, :])[np.isinf(case.inputs["logits"][3:])] == 0)


def test_negative_control_short_rows_do_not_see_the_broken_kernel():
    """Rows of at most 64 keys (one tile): the broken kernel is exact there, so the long cases are needed."""
    x = np.random.default_rng(0).standard_normal((3, 64)) * 4
    assert np.allclose(online_softmax(x, rescale=False), attention.masked_softmax(x), rtol=1e-13, atol=0)


def test_stored_outputs_selects_and_rejects_a_pattern_that_matches_nothing():
    outs = {"logits": np.zeros(1), "layers.0.E": np.zeros(1), "layers.0.x": np.zeros(1)}
    assert set(stored_outputs(outs, {"stored_outputs": ["logits", "layers.*.E"]})) == {"logits", "layers.0.E"}
    assert set(stored_outputs(outs, {})) == set(outs)
    with pytest.raises(ValueError, match=r"layers\.\*\.e"):
        stored_outputs(outs, {"stored_outputs": ["logits", "layers.*.e"]})


def test_param_scales_are_exact_and_checked():
    base = fixture_params(NARROW_LEARNED, 5)
    scaled = fixture_params(NARROW_LEARNED, 5, {"*.pwlst": 2.0**-3})
    for k in base:
        want = base[k] * 2.0**-3 if k.endswith(".pwlst") else base[k]
        assert np.array_equal(scaled[k], want), k
    for bad, msg in (({"*.pwlst": 0.3}, "power of two"), ({"*.nothing": 0.5}, "matches no parameter"),
                     ({"*.pwlst": 0.5, "*.plgatt_layer.*": 0.5}, "more than one")):
        with pytest.raises(ValueError, match=msg):
            fixture_params(NARROW_LEARNED, 5, bad)


def test_trained_g_record_names_the_bundled_layers():
    rec = trained_g_record((3, 4))
    assert np.array_equal(trained_g_from_record(rec), np.asarray(trained_g_lm())[[3, 4]])
    for bad in ({**rec, "sha256": "0" * 64}, {**rec, "layers": [5]}, {**rec, "layers": []}):
        with pytest.raises(ValueError, match="external_G_LM"):
            trained_g_from_record(bad)
    case = _load("model/real_width_trained_g_padded")
    assert case.meta["params"]["external_G_LM"]["layers"] == [0, 1]
    assert "params.safetensors" not in case.meta["files"]
