"""Each registry stage runs itself (``Stage.run``), and ``decoder_layer`` is exactly the chain of those runs
(issue 22, item 1): bitwise, over configurations, masks and the cache hooks; a perturbed stage is caught; the
emulated arithmetic of the harness reaches ``Stage.run``; the harness's ``reference_stage`` is the registry's run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from core_support import model_params, small_config, token_ids

from pldr_ref import layer
from pldr_ref.attention import causal_padding_mask
from pldr_ref.harness.policy import arithmetic as ar
from pldr_ref.harness.policy.stage_reference import reference_stage
from pldr_ref.layer import decoder_layer
from pldr_ref.model import forward, sequence_mask
from pldr_ref.ops import FLOAT64_OPS, PRIMITIVES, Ops
from pldr_ref.registry import ALL_STAGES, FORWARD_STAGES, Stage
from pldr_ref.rope import RopeTable, rope_angles

B, S, T0 = 2, 5, 3


def bits(a: np.ndarray) -> np.ndarray:
    """IEEE-754 bit patterns: equality is bitwise and NaN == NaN."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def chain_layer(stages: tuple[Stage, ...], params, li: int, config, x: np.ndarray, *, positions: np.ndarray,
                mask: np.ndarray | None = None, past_k: np.ndarray | None = None, past_v: np.ndarray | None = None,
                frozen_A: np.ndarray | None = None, frozen_G: tuple | None = None,
                gram_offset: np.ndarray | None = None, rope_table: RopeTable | None = None) -> dict[str, np.ndarray]:
    """The layer as the registry's per-layer stages that ``config`` enables (``Stage.enabled``) run one after
    another on each other's outputs (never on the layer's trace), the cache hooks substituting what they replace
    (spec §8): the KV cache's keys and values are prepended, its frozen A replaces A0 and the metric learner, a G
    cache replaces PLGA, and without PLGA parameters G is the fixed operator."""
    vals: dict = {"x": x, "positions": positions}
    extra = {"mask": mask, "gram_offset": gram_offset, "rope_table": rope_table}
    vals.update({k: v for k, v in extra.items() if v is not None})
    lp = params.layer(li)
    plga = ("metric_tensor", "potential_tensor", "energy_curvature")
    for st in (s for s in stages if s.per_layer):
        if st.name == "density_operator" and (frozen_A is not None or (frozen_G is not None
                                                                       and config.metric_learner == "none")):
            continue
        if st.name == "metric_learner" and frozen_A is not None:
            vals["A"] = frozen_A
            continue
        if st.name in plga and frozen_G is not None:
            vals.update({n: a for n, a in zip(("A_LM", "A_P", "G_LM"), frozen_G, strict=True) if a is not None})
            continue
        if st.name == "energy_curvature" and not st.enabled(config):
            vals["G_LM"] = np.broadcast_to(lp.g_fixed, (x.shape[0], *lp.g_fixed.shape))
        if not st.enabled(config):
            continue
        vals.update(st.run(params, li, config, vals))
        if st.name == "qkv_projection" and past_v is not None:
            vals["v"] = np.concatenate([past_v, vals["v"]], axis=2)
        if st.name == "rope" and past_k is not None:
            vals["k_rot"] = np.concatenate([past_k, vals["k_rot"]], axis=2)
    return vals


def assert_layer_is_chain(stages, params, config, x, **kw) -> None:
    trace = decoder_layer(params.layer(0), x, config, **kw)
    names = [n for n, _ in trace.items()]
    chained = chain_layer(stages, params, 0, config, x, **kw)
    assert set(names) <= set(chained), f"the chain lacks {set(names) - set(chained)}"
    for name, arr in trace.items():
        np.testing.assert_array_equal(bits(chained[name]), bits(arr), err_msg=f"{name} differs")


def _case(config, seed: int = 0, with_mask: bool = True):
    params = model_params(config, seed)
    ids = token_ids(config, B, S, seed)
    ids[1, -2:] = config.pad_id  # padding keys in row 1
    positions, mask = sequence_mask(config, ids)
    x = np.random.default_rng(seed).standard_normal((B, S, config.d_model))
    return params, x, positions, (mask if with_mask else None)


CONFIGS = {
    "default": {},
    "cumulative": {"gram_mode": "cumulative"},
    "v900": {"metric_learner": "v900", "A_dff_depth": 12},
    "no_learner_fixed_G": {"metric_learner": "none", "g_mode": "identity"},
    "fixed_random_G": {"g_mode": "random"},
    "rope_f32_table": {"rope_table": "float32", "rope_precision": "float32"},
    "rope_keras_table_f32_qk": {"rope_table": "keras-0.6.4", "rope_arithmetic": "float64_qk_f32"},
    "rope_half_f32": {"rope_layout": "half", "rope_precision": "float32"},
    "ideal_mask_f32_softmax": {"mask_mode": "ideal", "softmax_precision": "float32", "masked_row": "zeros"},
    "finfo_reciprocal": {"mask_mode": "finfo_min", "score_scale": "reciprocal"},
    # every registry stage on (each stage's ``enabled_by`` at its first value): a new optional stage is chained too
    "every_stage": {f: values[0] for s in ALL_STAGES for f, values in s.enabled_by},
}


@pytest.mark.parametrize("with_mask", [True, False], ids=["mask", "no_mask"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decoder_layer_is_the_chain_of_the_registry_stages(name: str, with_mask: bool) -> None:
    config = small_config(**CONFIGS[name])
    params, x, positions, mask = _case(config, with_mask=with_mask)
    assert_layer_is_chain(FORWARD_STAGES, params, config, x, positions=positions, mask=mask)


def test_explicit_rope_table_reaches_the_stage() -> None:
    config = small_config(rope_table="explicit")
    params, x, positions, mask = _case(config)
    cos, sin = rope_angles(np.arange(config.max_seq_len), config.d_k, config.rope_base)
    table = RopeTable(cos.astype(np.float32), sin.astype(np.float32))
    assert_layer_is_chain(FORWARD_STAGES, params, config, x, positions=positions, mask=mask, rope_table=table)


def _cache_hooks(config, params, seed: int = 1):
    """Realistic cache contents: the trace of an earlier call on T0 rows."""
    ids = token_ids(config, B, T0, seed)
    prior = forward(params, ids).layers[0]
    positions = np.arange(T0, T0 + S)
    mask = causal_padding_mask(positions, np.arange(T0 + S), np.zeros((B, T0 + S), dtype=bool))
    return prior, positions, mask


@pytest.mark.parametrize("hook", ["kv", "kv_cumulative", "g", "g_no_A_P", "kv_g", "g_fixed_no_learner"])
def test_layer_with_cache_hooks_is_the_chain(hook: str) -> None:
    fields = {"kv_cumulative": {"gram_mode": "cumulative"},
              "g_fixed_no_learner": {"metric_learner": "none", "g_mode": "identity"}}.get(hook, {})
    config = small_config(**fields)
    params, x, _, _ = _case(config)
    prior, positions, mask = _cache_hooks(config, params)
    kw: dict = {"positions": positions, "mask": mask}
    if hook.startswith("kv"):
        kw.update(past_k=prior.k_rot, past_v=prior.v)
        if hook == "kv_cumulative":
            kw["gram_offset"] = prior.A0[:, :, -1]
        else:
            kw["frozen_A"] = prior.A
    if "g" in hook.split("_"):
        kw["frozen_G"] = (prior.A_LM, None if hook == "g_no_A_P" else prior.A_P, prior.G_LM)
        kw["mask"] = None  # a G-cache call on the same rows: no cached keys
        kw["positions"] = np.arange(S)
        kw.pop("past_k", None), kw.pop("past_v", None)
        if hook == "kv_g":
            kw.update(past_k=prior.k_rot, past_v=prior.v, positions=np.arange(T0, T0 + S), mask=mask)
    assert_layer_is_chain(FORWARD_STAGES, params, config, x, **kw)


def test_workspace_layer_is_the_chain() -> None:
    config = small_config()
    params, x, positions, mask = _case(config)
    ws = np.empty((B, config.num_heads, S, S))
    trace = decoder_layer(params.layer(0), x, config, positions=positions, mask=mask, workspace=ws)
    chained = chain_layer(FORWARD_STAGES, params, 0, config, x, positions=positions, mask=mask)
    assert trace.scores is None and trace.E is ws
    np.testing.assert_array_equal(bits(trace.E), bits(chained["E"]))
    np.testing.assert_array_equal(bits(trace.out2), bits(chained["out2"]))


def _perturbed(name: str) -> tuple[Stage, ...]:
    """The registry with stage ``name``'s output moved by one ulp."""
    def nudge(st: Stage) -> Stage:
        body = st.body

        def moved(**kw):
            return np.nextafter(body(**kw), np.inf)

        moved.__signature__ = __import__("inspect").signature(body)
        return dataclasses.replace(st, body=moved)

    return tuple(nudge(s) if s.name == name else s for s in FORWARD_STAGES)


@pytest.mark.parametrize("stage", ["value_mix", "metric_learner", "post_ffn_norm"])
def test_negative_control_a_stage_one_ulp_off_is_caught(stage: str) -> None:
    config = small_config()
    params, x, positions, mask = _case(config)
    with pytest.raises(AssertionError, match="differs"):
        assert_layer_is_chain(_perturbed(stage), params, config, x, positions=positions, mask=mask)


def test_negative_control_a_dropped_cache_hook_is_caught() -> None:
    """The chain without the KV cache's keys (what a layer ignoring ``past_k`` would compute) is caught."""
    config = small_config()
    params, x, _, _ = _case(config)
    prior, positions, mask = _cache_hooks(config, params)
    trace = decoder_layer(params.layer(0), x, config, positions=positions, mask=mask, past_k=prior.k_rot,
                          past_v=prior.v, frozen_A=prior.A)
    chained = chain_layer(FORWARD_STAGES, params, 0, config, x, positions=positions, mask=mask[..., T0:],
                          frozen_A=prior.A)
    assert not np.array_equal(bits(trace.out2), bits(chained["out2"]))


# ------------------------------------------------------------------ the registry's run functions themselves
def every_stage_config():
    """The tiny config with every registry stage enabled (each ``enabled_by`` at its first value)."""
    fields = {f: values[0] for s in ALL_STAGES for f, values in s.enabled_by}
    config = small_config(**fields)
    assert all(s.enabled(config) for s in ALL_STAGES)
    return config


def _stage_inputs(config, params) -> dict:
    """Every upstream value of every stage, from a traced forward of a tiny model."""
    ids = token_ids(config, B, S, 0)
    out = forward(params, ids)
    positions, mask = sequence_mask(config, ids)
    vals = {"token_ids": ids, "positions": positions, "mask": mask, "embed": out.embed,
            "hidden": out.layers[-1].out2, **dict(out.layers[0].items())}
    return vals


def test_every_stage_runs_itself_and_returns_its_declared_outputs() -> None:
    config = every_stage_config()
    params = model_params(config)
    vals = _stage_inputs(config, params)
    for st in ALL_STAGES:
        assert st.body is not None, f"stage {st.name!r} has no body"
        required = {n for n, req in st.body_inputs if req}
        assert required <= set(st.inputs) | {"positions", "mask"}, (st.name, required)
        got = st.run(params, 0 if st.per_layer else None, config, vals)
        assert tuple(got) == st.outputs
        for name, arr in got.items():
            assert isinstance(arr, np.ndarray) and arr.size, (st.name, name)


def test_stage_bodies_are_not_primitives() -> None:
    """A body stored in a Stage is never a primitive of :class:`pldr_ref.ops.Ops` (it would compute in float64
    whatever ``ops`` a run passes): it computes with ``ops``'s primitives."""
    primitives = {getattr(Ops, n) for n in PRIMITIVES}
    assert not [s.name for s in ALL_STAGES if s.body in primitives]


def test_emulated_arithmetic_reaches_stage_run() -> None:
    """With the harness's emulated bfloat16 arithmetic as ``ops`` every stage built on a primitive gives other
    numbers than the plain float64 run (so ``ops`` reaches every body through ``Stage.run``), RoPE included (its
    table and rotation are emulated); the others (gather, mask) do not."""
    config = every_stage_config()
    params = model_params(config)
    vals = _stage_inputs(config, params)

    def run_all(ops=FLOAT64_OPS):
        return {s.name: s.run(params, 0 if s.per_layer else None, config, vals, ops) for s in ALL_STAGES}

    plain = run_all()
    emulated = run_all(ar.EmulatedOps(ar.Arithmetic("bf16-test"), "bfloat16"))
    changed = {name for name in plain
               if any(not np.array_equal(bits(plain[name][k]), bits(emulated[name][k]))
                      for k in plain[name] if plain[name][k].dtype.kind == "f")}
    assert changed == {s.name for s in ALL_STAGES} - {"sequence_mask", "embedding"}


def test_reference_stage_is_the_registry_run() -> None:
    config = every_stage_config()
    params = model_params(config)
    vals = _stage_inputs(config, params)
    for st in ALL_STAGES:
        layer_index = 0 if st.per_layer else None
        want = st.run(params, layer_index, config, vals)
        got = reference_stage(st.name, layer_index, config, params, vals)
        assert got.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(bits(got[k]), bits(want[k]), err_msg=f"{st.name}.{k}")
    with pytest.raises(ValueError, match="unknown stage"):
        reference_stage("no_such_stage", 0, config, params, vals)
    with pytest.raises(ValueError, match="needs a layer index"):
        reference_stage("ffn", None, config, params, vals)


def test_reference_stage_rounds_only_the_masked_logits() -> None:
    """``round_to`` reaches the masked logits inside the softmax (a -1e9 + score the dtype cannot resolve is
    absorbed), not E; every other stage ignores it."""
    config = every_stage_config()
    params = model_params(config)
    vals = _stage_inputs(config, params)

    def r16(a):
        with np.errstate(over="ignore"):
            return a.astype(np.float16).astype(np.float64)

    plain = reference_stage("masked_softmax", 0, config, params, vals)["E"]
    rounded = reference_stage("masked_softmax", 0, config, params, vals, round_to=r16)["E"]
    assert not np.array_equal(plain, rounded)
    assert not np.array_equal(rounded, r16(rounded))  # E itself is not rounded
    same = reference_stage("ffn", 0, config, params, vals, round_to=r16)["ffn_out"]
    np.testing.assert_array_equal(bits(same), bits(reference_stage("ffn", 0, config, params, vals)["ffn_out"]))
    assert layer.softmax_weights is dict((s.name, s.body) for s in FORWARD_STAGES)["masked_softmax"]
