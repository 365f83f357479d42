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


# ----------------------------------------------------------------------------- cause 18
def _entry_points() -> dict[str, object]:
    from pldr_ref.inference import generation, modes, padding, scoring, step

    names = {
        pldr_ref.forward: "forward", step.cached_forward: "cached_forward", modes.prefill: "prefill",
        generation.generate: "generate", modes.teacher_forced_logits: "teacher_forced_logits",
        modes.cache_gap: "cache_gap", padding.final_real_row_effect: "final_real_row_effect",
        padding.stripped_logits: "stripped_logits",
    }
    for fn in vars(scoring).values():
        if (callable(fn) and getattr(fn, "__module__", "") == scoring.__name__ and not fn.__name__.startswith("_")
                and _runs_the_model(fn)):
            names[fn] = fn.__name__
    return {v: k for k, v in names.items()}


def _runs_the_model(fn: object) -> bool:
    """A public function whose first parameter is the model's ``params``."""
    import inspect

    try:
        first = next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        return False
    return first == "params"


def _missing_inputs(fn: object) -> list[str]:
    import inspect

    from pldr_ref.inference.explicit import EXPLICIT_INPUTS

    return [n for n in EXPLICIT_INPUTS if n not in inspect.signature(fn).parameters]


def test_every_entry_point_that_runs_the_model_takes_the_explicit_inputs() -> None:
    from pldr_ref.inference import generation, modes, padding, scoring

    listed = _entry_points()
    for name, fn in listed.items():
        assert not _missing_inputs(fn), (name, _missing_inputs(fn))
    # every public model-running function of the inference modules is listed (a new one cannot be forgotten);
    # advance takes them from its DecodeState, the external-G helpers do not run the model
    exempt = {"advance", "params_with_external_g", "final_real_row_effect", "stripped_logits"}
    for module in (generation, modes, padding, scoring):
        for fn in vars(module).values():
            if (callable(fn) and getattr(fn, "__module__", "") == module.__name__ and not fn.__name__.startswith("_")
                    and _runs_the_model(fn) and fn.__name__ not in exempt):
                assert fn.__name__ in listed, fn.__name__

    def lacking(params, token_ids, *, attention_mask=None, rope_table=None):  # negative control
        return None

    assert _missing_inputs(lacking) == ["position_ids", "softmax_kernel", "check_finite_values", "ops"]


def _torchtune_cache(config: PLDRConfig) -> np.ndarray:
    """torchtune's RoPE cache [P, d_k/2, 2] in float32, computed here from the formula."""
    half = config.d_k // 2
    theta = (1.0 / (config.rope_base ** (np.arange(0, config.d_k, 2)[:half].astype(np.float32) / config.d_k)))
    idx = np.arange(config.max_seq_len, dtype=np.float32)[:, None] * theta.astype(np.float32)[None, :]
    return np.stack([np.cos(idx), np.sin(idx)], axis=-1).astype(np.float32)


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1))
    return lse - np.take_along_axis(z, targets[..., None], axis=-1)[..., 0]


@pytest.fixture(scope="module")
def hf_replay():
    """An HF-replay setup: hf-sdpa profile with the explicit torchtune table, left padding, HF positions offset."""
    cfg = TINY.emulate("hf-sdpa", rope_table="explicit")
    params = model_params(cfg, 7)
    table = RopeTable.from_torchtune_cache(_torchtune_cache(cfg))
    ids = token_ids(cfg, 2, 6, 7)
    mask = np.ones((2, 6), dtype=np.int64)
    mask[0, :2] = 0
    pos = np.array([[1, 1, 0, 1, 2, 3], [2, 3, 4, 5, 6, 7]])  # 4.x pads at 1; row 1 at an offset
    x = dict(attention_mask=mask, position_ids=pos, rope_table=table)
    return params, ids, x


def _fwd(params, ids, **x) -> np.ndarray:
    return pldr_ref.forward(params, ids, **x).logits


def _cut(x: dict, stop: int) -> dict:
    return {k: v[:, :stop] if k in ("attention_mask", "position_ids") else v for k, v in x.items()}


def _grow(x: dict, extra: int) -> dict:
    out = dict(x)
    if "attention_mask" in x:
        m = x["attention_mask"]
        out["attention_mask"] = np.concatenate([m, np.ones((m.shape[0], extra), m.dtype)], axis=1)
    if "position_ids" in x:
        p = x["position_ids"]
        out["position_ids"] = np.concatenate([p, p[:, -1:] + 1 + np.arange(extra)[None]], axis=1)
    return out


def _cases(params, ids, x):
    """(name, call with explicit inputs x, expected value computed here from pldr_ref.forward with x)."""
    from pldr_ref.inference import modes, padding, scoring
    from pldr_ref.inference.generation import generate

    t = ids.shape[1]
    ctx, cand = ids[1, :4], [ids[1, 4:6]]
    ctx_x = {k: v[1:2, :4] if k in ("attention_mask", "position_ids") else v for k, v in x.items()}
    prompt, cont = ids[:, :4], ids[:, 4:6]

    def tf_expected(px: dict) -> np.ndarray:
        return np.stack([_fwd(params, ids[:, :4 + j], **_grow(px, j))[:, -1] for j in range(2)], axis=1)

    def block_nll(xx: dict) -> np.ndarray:
        return _nll(_fwd(params, ids[:, :-1], **_cut(xx, t - 1)), ids[:, 1:])

    def prefix_rows(xx: dict, upto: int) -> np.ndarray:
        return np.stack([_fwd(params, ids[:, :k], **_cut(xx, k))[:, -1] for k in range(1, upto + 1)], axis=1)

    pads = np.concatenate([ids, ids[:, :1]], axis=1)
    return [
        ("blockwise_cross_entropy", lambda xx: scoring.blockwise_cross_entropy(params, ids, **xx).nll,
         lambda xx: block_nll(xx)),
        ("hf_blockwise_cross_entropy", lambda xx: scoring.hf_blockwise_cross_entropy(params, ids, ids, **xx).nll,
         lambda xx: _nll(pldr_ref.forward(params, ids, pad_masking=False, **xx).logits[:, :-1], ids[:, 1:])),
        ("prefix_final_row_logits", lambda xx: scoring.prefix_final_row_logits(params, ids, **xx),
         lambda xx: prefix_rows(xx, t)),
        ("sequential_nll", lambda xx: scoring.sequential_nll(params, ids, **xx).nll,
         lambda xx: _nll(prefix_rows(xx, t - 1), ids[:, 1:])),
        ("one_pass_block_scores", lambda xx: scoring.one_pass_block_scores(params, ctx, cand, **{
            k: (v[1:2, :4] if k in ("attention_mask", "position_ids") else v) for k, v in xx.items()}),
         lambda xx: np.array([-_nll(_fwd(params, ids[1:2], **_grow(ctx_x, 2))[0, 3:5], ids[1, 4:6]).sum()])),
        ("sequential_candidate_scores", lambda xx: scoring.sequential_candidate_scores(params, ctx, cand, **{
            k: (v[1:2, :4] if k in ("attention_mask", "position_ids") else v) for k, v in xx.items()}),
         lambda xx: np.array([-sum(_nll(_fwd(params, ids[1:2, :k], **_cut(_grow(ctx_x, 2), k))[0, -1],
                                       ids[1, k]) for k in (4, 5))])),
        ("generate", lambda xx: generate(params, prompt, 2, mode="none", **_cut(xx, 4)).step_logits[0],
         lambda xx: _fwd(params, prompt, **_cut(xx, 4))[:, -1]),
        ("sequential_generation",
         lambda xx: scoring.sequential_generation(params, prompt, 1, **_cut(xx, 4)).step_logits[0],
         lambda xx: _fwd(params, prompt, **_cut(xx, 4))[:, -1]),
        ("teacher_forced_logits", lambda xx: modes.teacher_forced_logits(params, prompt, cont, "none", **_cut(xx, 4)),
         lambda xx: tf_expected(_cut(xx, 4))),
        ("prompt_frozen_scores",
         lambda xx: scoring.prompt_frozen_scores(params, prompt, cont, "none", **_cut(xx, 4)),
         lambda xx: -_nll(tf_expected(_cut(xx, 4)), cont)),
        ("cache_gap", lambda xx: modes.cache_gap(params, prompt, cont, "hf", **_cut(xx, 4)),
         lambda xx: float(np.max(np.abs(modes.teacher_forced_logits(params, prompt, cont, "hf", **_cut(xx, 4))
                                        - tf_expected(_cut(xx, 4)))) / np.max(np.abs(tf_expected(_cut(xx, 4)))))),
        ("scoring_gap", lambda xx: scoring.scoring_gap(params, ids, **xx).max_abs_logit_gap,
         lambda xx: float(np.max(np.abs(_fwd(params, ids[:, :-1], **_cut(xx, t - 1)) - prefix_rows(xx, t - 1))))),
        ("prefix_consistency_gap", lambda xx: scoring.prefix_consistency_gap(params, ids, **xx),
         lambda xx: float(np.max(np.abs(_fwd(params, ids, **xx) - prefix_rows(xx, t)))
                          / np.max(np.abs(prefix_rows(xx, t))))),
        ("final_real_row_effect", lambda xx: padding.final_real_row_effect(params, ids, ids[:, :1], **xx).max_abs,
         lambda xx: float(np.max(np.abs(_fwd(params, ids, **xx)[:, -1] - _fwd(params, pads, **dict(
             _grow(xx, 1), attention_mask=np.concatenate([xx["attention_mask"], [[0], [0]]], axis=1)))[:, t - 1])))),
        ("stripped_logits", lambda xx: padding.stripped_logits(params, ids[1:], None, **{
            k: (v[1:] if k == "position_ids" else v) for k, v in xx.items() if k != "attention_mask"})[0],
         lambda xx: _fwd(params, ids[1:], **{k: (v[1:] if k == "position_ids" else v) for k, v in xx.items()
                                             if k != "attention_mask"})[0]),
    ]


def test_an_hf_replay_config_goes_through_every_entry_point_and_matches_forward(hf_replay) -> None:
    params, ids, x = hf_replay
    checked = set()
    for name, call, expected in _cases(params, ids, x):
        got, want = np.asarray(call(x), dtype=np.float64), np.asarray(expected(x), dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=name)
        # negative control: the same call without the HF positions differs, so an ignored argument is caught
        bare = {k: v for k, v in x.items() if k != "position_ids"}
        assert not np.allclose(np.asarray(call(bare), dtype=np.float64), want, rtol=1e-9, atol=1e-12), name
        checked.add(name)
    listed = set(_entry_points()) - {"forward", "cached_forward", "prefill"}  # checked by their own tests
    assert listed <= checked, listed - checked
