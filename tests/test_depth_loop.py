"""One float64 depth loop (issue 22, item 2): ``model.depth_pass`` serves ``forward``, the cached step, the
diagnostics' layer passes and the naive baselines, bitwise; and the layer's one hook, ``on_stage`` (item 5),
with its context-local default used by the baselines of the inference and scoring code."""

from __future__ import annotations

import ast
import pathlib
import threading

import ml_dtypes
import numpy as np
import pytest
from core_support import model_params, small_config, token_ids

from pldr_ref import stage_hooks
from pldr_ref.diagnostics.run import final_row_forward, layer_pass
from pldr_ref.fixtures.baselines import (
    StageRounding,
    layer_stage_rounding,
    rounded_forward,
    rounded_params,
    storage_round,
)
from pldr_ref.inference.step import cached_forward
from pldr_ref.layer import decoder_layer
from pldr_ref.model import depth_pass, embedding_scale, forward, sequence_mask

ROOT = pathlib.Path(__file__).resolve().parents[1]


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(bits(a), bits(b))


@pytest.fixture(scope="module")
def model():
    config = small_config(num_layers=2)
    return config, model_params(config, 3), token_ids(config, 2, 6, 3)


def test_forward_cached_forward_and_diagnostics_share_the_loop(model) -> None:
    _, params, ids = model
    out = forward(params, ids)
    step = cached_forward(params, ids).output
    lean = forward(params, ids, keep_trace=False)
    traces, hidden = layer_pass(params, ids)
    last, g = final_row_forward(params, ids)
    assert same(step.logits, out.logits) and same(lean.logits, out.logits) and lean.layers == ()
    for a, b, c in zip(out.layers, step.layers, traces, strict=True):
        for (name, x), (_, y), (_, z) in zip(a.items(), b.items(), c.items(), strict=True):
            assert same(x, y) and same(x, z), name
    assert same(hidden, out.layers[-1].out2)
    assert same(g, np.stack([t.G_LM for t in out.layers]))
    np.testing.assert_allclose(last, out.logits[:, -1], rtol=1e-12, atol=1e-12)


def test_depth_pass_head_rows_and_refusals(model) -> None:
    config, params, ids = model
    positions, mask = sequence_mask(config, ids)
    assert depth_pass(params, ids, positions=positions, mask=mask, head="none").logits is None
    with pytest.raises(ValueError, match="head must be one of"):
        depth_pass(params, ids, positions=positions, mask=mask, head="first")
    with pytest.raises(ValueError, match="no cache inputs"):
        depth_pass(params, ids, positions=positions, mask=mask, keep_trace=False, layer_inputs=lambda i: {})


def test_rounded_forward_rounds_the_embedding_scale_before_the_product(model) -> None:
    """The naive bfloat16 run's embedding is r(E[ids] * r(sqrt(d))), written out here independently, and its
    layers equal ``decoder_layer`` with the rounding hook; a run without the scale's rounding differs."""
    config, params, ids = model
    config = config.replace(d_k=6)  # sqrt(12) is not a bfloat16 number: rounding it first matters
    params = model_params(config, 3)
    bf16 = ml_dtypes.bfloat16
    p = rounded_params(params, bf16)
    r = StageRounding(bf16)
    run = rounded_forward(params, ids, bf16)
    scale = storage_round(np.array(embedding_scale(config)), bf16)
    want = storage_round(p["decoder.embedding.weight"][ids] * scale, bf16)
    assert same(run["embed"], want)
    unrounded_scale = storage_round(p["decoder.embedding.weight"][ids] * embedding_scale(config), bf16)
    assert not same(run["embed"], unrounded_scale)  # negative control: the order of the roundings shows
    positions, mask = sequence_mask(config, ids)
    t = decoder_layer(p.layer(0), run["x0"], config, positions=positions, mask=mask, on_stage=r)
    for name, arr in t.items():
        assert same(run[f"layers.0.{name}"], arr), name
    assert same(run["layers.0.x"], run["x0"])  # the hook leaves the layer input to its producer


def test_layer_stage_rounding_is_a_context_default_hook(model) -> None:
    """Inside ``layer_stage_rounding`` the inference code's layers round every stage (before their own finiteness
    check): the trace equals ``decoder_layer`` with the rounding hook given explicitly; outside, and in another
    thread, nothing is rounded."""
    config, params, ids = model
    p = rounded_params(params, ml_dtypes.bfloat16)
    with layer_stage_rounding(ml_dtypes.bfloat16):
        inside = cached_forward(p, ids).output
        other: list = []
        th = threading.Thread(target=lambda: other.append(cached_forward(p, ids).output))
        th.start()
        th.join()
    outside = cached_forward(p, ids).output
    positions, mask = sequence_mask(config, ids)
    t = decoder_layer(p.layer(0), inside.x0, config, positions=positions, mask=mask,
                      on_stage=StageRounding(ml_dtypes.bfloat16))
    for name, arr in t.items():
        assert same(getattr(inside.layers[0], name), arr), name
    assert same(inside.layers[0].out2, storage_round(inside.layers[0].out2, ml_dtypes.bfloat16))
    assert not same(outside.layers[0].out2, inside.layers[0].out2)
    assert same(other[0].logits, outside.logits)  # the default is context-local
    assert stage_hooks.layer_hook(None) is None


def test_default_hook_is_restored_after_an_error() -> None:
    def hook(name, arr):
        return arr

    with pytest.raises(RuntimeError), stage_hooks.default_stage_hook(hook):
        assert stage_hooks.layer_hook(None) is hook
        raise RuntimeError("boom")
    assert stage_hooks.layer_hook(None) is None


def test_finiteness_check_names_the_first_bad_stage(model) -> None:
    _, params, ids = model
    bad = params.replace(**{"decoder.dec_layers.1.mha1.wv.weight":
                            np.full_like(params["decoder.dec_layers.1.mha1.wv.weight"], 1e308)})
    with pytest.raises(FloatingPointError, match=r"stage 'layers\.1\.v' produced"):
        forward(bad, ids)
    with pytest.raises(FloatingPointError, match=r"stage 'layers\.1\.v' produced"):
        cached_forward(bad, ids)
    forward(bad, ids, check_finite_values=False)  # no check: no error


def test_the_float64_depth_loop_is_written_once() -> None:
    """Every float64 embed -> layers -> head loop goes through ``model.depth_pass``: outside it (and the
    single-layer fixture runners), no module of the float64 engine calls ``decoder_layer``."""
    callers = set()
    for path in (ROOT / "pldr_ref").rglob("*.py"):
        rel = path.relative_to(ROOT / "pldr_ref").as_posix()
        if rel.startswith(("exact/", "backends/")):
            continue  # other engines, with their own layers
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                # the float64 layer by its name or through its module; a torch backend's method
                # (``self.decoder_layer``, ``super().decoder_layer`` in harness/controls/mutants.py) is another engine
                direct = isinstance(f, ast.Name) and f.id == "decoder_layer"
                via_module = (isinstance(f, ast.Attribute) and f.attr == "decoder_layer"
                              and isinstance(f.value, ast.Name) and f.value.id == "layer")
                if direct or via_module:
                    callers.add(rel)
    assert callers == {"model.py", "fixtures/runners.py", "fixtures/baselines.py", "fixtures/exact_tier.py"}
