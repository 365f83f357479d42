"""One composition in the JAX backend (issue 32, item 4): its decoder layer and forward walk the registry's stages
with its own stage table (:mod:`pldr_ref.backends.stage_walk`), so a whole case equals, bit for bit, its isolated
stages chained by hand (:mod:`engine_stage_chain`) -- in every dtype, since JAX holds activations in the dtype (A_LM
and A_P in the float32 work dtype, which an isolated request keeps too).  The negative control shows the comparison
catches a layer that runs two stage bodies swapped.

Default run: the layer traced abstractly (``jax.eval_shape``: no compilation, no arithmetic) with a spy stage
table -- the stage bodies it calls, in order, are the harness's isolated stages of the case, and a layer with two
bodies swapped is caught.  ``-m slow``: the bitwise checks, eager (``jit=False``: the same jnp code op by op; every
primitive compiles once per shape, 78 s for one layer case in two dtypes on a loaded 2-core machine).  Jitted, a
layer is one XLA computation and its isolated stages separate ones, which XLA fuses differently: the bits differ
(measured: 11 of the 15 entries of ``layer/tiny_cached_step`` in float64), so the bitwise check is of the composition,
in eager mode; ``tests/test_engine_jax.py`` bounds jitted against eager.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from engine_stage_chain import bitwise_differences, case_named, chain_case
from engine_support import require

require("jax")

import jax  # noqa: E402

from pldr_ref.backends.jax_backend import STAGE_RUNNERS, JaxBackend, traced_config  # noqa: E402
from pldr_ref.harness.verdict.localize import stage_plan  # noqa: E402

#: ``-m slow``: a fixed G, the cumulative Gram, the v900 metric learner, an additive mask, whole forwards.
SLOW_CASES = ("layer/tiny_identity_g", "layer/tiny_cumulative_gram", "layer/tiny_v900", "layer/tiny_l1_mask_additive",
              "model/tiny_identity_g_short", "model/tiny_padded_exact")


@pytest.fixture(scope="module")
def eager():
    return JaxBackend(jit=False)


def check_bitwise(backend, name: str, dtypes) -> None:
    case = case_named(name)
    for dtype in dtypes:
        chain = chain_case(backend, case, dtype)
        assert len(chain[0]) >= 13, sorted(chain[0])  # every stage of a layer ran in the chain
        assert bitwise_differences(backend.run_case(case, dtype), chain) == [], dtype


#: The stage table with two bodies swapped (the post norms: LN2 where LN1 belongs and back).
SWAPPED_NORMS = {**STAGE_RUNNERS, "post_attention_norm": STAGE_RUNNERS["post_ffn_norm"],
                 "post_ffn_norm": STAGE_RUNNERS["post_attention_norm"]}


def bodies_called_by_the_layer(case, table) -> list[str]:
    """The stage bodies (named by their entry of :data:`STAGE_RUNNERS`) a layer or forward ``case`` calls, in order,
    when its backend's stage table is ``table``; traced with ``jax.eval_shape`` (shapes only: milliseconds)."""
    body_name = {id(fn): name for name, fn in STAGE_RUNNERS.items()}
    calls: list[str] = []

    def spy(fn):
        def run(*args):
            calls.append(body_name[id(fn)])
            return fn(*args)
        return run

    backend = JaxBackend(jit=False)
    backend.stage_runners = {name: spy(fn) for name, fn in table.items()}

    def shaped(a):  # the argument as eval_shape sees it: a shape and the dtype a float32 run holds it in
        a = np.asarray(a)
        return jax.ShapeDtypeStruct(a.shape, {"f": np.float32, "i": np.int64}.get(a.dtype.kind, a.dtype))

    c = traced_config(case.config)
    if case.kind == "forward":
        P = {k: shaped(v) for k, v in case.params.items()}
        run = functools.partial(backend.forward, c=c, dt="float32", pad_masking=True)
        jax.eval_shape(run, P, shaped(case.inputs["token_ids"]), 0, None)
    else:
        P = {k: shaped(v) for k, v in backend.layer_params(dict(case.params.items()), int(case.args["layer"])).items()}
        feed = {k: shaped(v) for k, v in case.inputs.items()}
        jax.eval_shape(functools.partial(backend.decoder_layer, c=c, dt="float32"), P, feed)
    return calls


@pytest.mark.parametrize("name", ("layer/tiny_cached_step", "model/tiny_identity_g_short"))
def test_layer_calls_its_stage_bodies_in_the_harness_order(name):
    """A KV-cached layer step (past keys / values, frozen A: no Gram, no metric learner) and a forward (sequence mask,
    embedding, input norm, two layers with a fixed G: no PLGA, LM head)."""
    case = case_named(name)
    isolated = [stage for stage, _, _, _ in stage_plan(case)]
    assert bodies_called_by_the_layer(case, STAGE_RUNNERS) == isolated
    assert len(isolated) >= 9, isolated


def test_negative_control_swapped_bodies_in_the_layer_order_are_caught():
    case = case_named("layer/tiny_cached_step")
    called = bodies_called_by_the_layer(case, SWAPPED_NORMS)
    isolated = [stage for stage, _, _, _ in stage_plan(case)]
    assert called != isolated
    assert [a for a, b in zip(called, isolated, strict=True) if a != b] == ["post_ffn_norm", "post_attention_norm"]


class SwappedNormsInLayer(JaxBackend):
    """A second composition that drifted: the layer runs the two post-norm stage bodies swapped, while an isolated
    stage request still runs the right body."""

    def decoder_layer(self, *args, **kwargs):
        self.stage_runners = SWAPPED_NORMS
        try:
            return super().decoder_layer(*args, **kwargs)
        finally:
            del self.stage_runners  # back to the class's table for isolated stages


@pytest.mark.slow
def test_cached_layer_equals_its_chained_stages_bitwise(eager):
    """A KV-cached step (past keys / values, frozen A, learned G)."""
    check_bitwise(eager, "layer/tiny_cached_step", ("float32", "bfloat16"))


@pytest.mark.slow
def test_negative_control_two_stages_swapped_in_the_layer_is_caught():
    backend = SwappedNormsInLayer(jit=False)
    case = case_named("layer/tiny_cached_step")
    bad = bitwise_differences(backend.run_case(case, "float32"), chain_case(backend, case, "float32"))
    assert [b.split(":")[0] for b in bad] == ["layers.0.ffn_out", "layers.0.out1", "layers.0.out2"], bad


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_CASES)
def test_more_cases_equal_their_chained_stages_bitwise_eager(eager, name):
    check_bitwise(eager, name, ("float64", "float32", "bfloat16", "float16"))
