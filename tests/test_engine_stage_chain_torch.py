"""One composition in the torch backend (issue 32, item 4): its decoder layer and forward walk the registry's stages
with its own stage table (:mod:`pldr_ref.backends.stage_walk`), so a whole case equals, bit for bit, its isolated
stages chained by hand (:mod:`engine_stage_chain`), with every cache hook; the negative controls show the comparison
catches a one-ulp drift and a layer that runs two stage bodies swapped.

float64 and float32 only: in bfloat16 / float16 an isolated stage's inputs are rounded to the 16-bit storage dtype
(the harness's contract) while a layer keeps the float32 values of its elementwise stages (autocast), so the chain
and the layer differ by design there (the JAX engine holds activations in the dtype: its test covers all four).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from engine_stage_chain import bitwise_differences, case_named, chain_case

pytest.importorskip("torch")

from pldr_ref.backends.torch_backend import STAGE_RUNNERS, TorchBackend

#: Default run: two small cases covering the walk's paths -- a KV-cached layer step (past keys / values, frozen A,
#: learned G) and a whole forward (sequence mask, embedding, input norm, two layers with a fixed identity G, LM
#: head); a frozen G is the test below.
CASES = ("layer/tiny_cached_step", "model/tiny_identity_g_short")

#: ``-m slow``: the other layer cases (cumulative Gram, v900 metric learner, the three mask modes, left padding) and
#: forwards with a learned and a random G.
SLOW_CASES = ("layer/tiny_cumulative_gram", "layer/tiny_v900", "layer/tiny_l1_mask_additive",
              "layer/tiny_l1_mask_finfo_min", "layer/tiny_l1_mask_ideal", "layer/tiny_left_pad_additive",
              "layer/tiny_half_f32rope", "layer/tiny_identity_g", "model/tiny_exact", "model/tiny_padded_exact",
              "g_mode/random_small")


@pytest.fixture(scope="module")
def backend():
    return TorchBackend(device="cpu", num_threads=1)


def frozen_g_case(name: str = "layer/tiny_cached_step"):
    """A cached-step layer case that also freezes G: its own golden A_LM, A_P, G_LM given as the G cache."""
    case = case_named(name)
    li = int(case.args["layer"])
    frozen = {f"frozen_{e}": case.outputs[f"layers.{li}.{e}"] for e in ("A_LM", "A_P", "G_LM")}
    return dataclasses.replace(case, inputs={**case.inputs, **frozen})


def check_bitwise(backend, name: str) -> None:
    case = case_named(name)
    for dtype in ("float64", "float32"):
        chain = chain_case(backend, case, dtype)
        assert len(chain[0]) >= 13, sorted(chain[0])  # every stage of a layer ran in the chain
        assert bitwise_differences(backend.run_case(case, dtype), chain) == [], dtype


@pytest.mark.parametrize("name", CASES)
def test_whole_case_equals_its_chained_stages_bitwise(backend, name):
    check_bitwise(backend, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_CASES)
def test_whole_case_equals_its_chained_stages_bitwise_more_cases(backend, name):
    check_bitwise(backend, name)


def test_frozen_g_layer_equals_its_chained_stages_bitwise(backend):
    case = frozen_g_case()
    whole = backend.run_case(case, "float32")
    assert bitwise_differences(whole, chain_case(backend, case, "float32")) == []
    plain = backend.run_case(case_named("layer/tiny_cached_step"), "float32")
    assert not np.array_equal(whole["layers.0.G_LM"], plain["layers.0.G_LM"])  # the frozen G was used


def test_negative_control_one_ulp_drift_is_caught(backend):
    case = case_named("layer/tiny_cached_step")
    whole = backend.run_case(case, "float32")
    drifted = dict(whole)
    ffn = np.array(whole["layers.0.ffn_out"], dtype=np.float32)
    ffn.flat[3] = np.nextafter(ffn.flat[3], np.float32(np.inf))  # one float32 ulp in one value
    drifted["layers.0.ffn_out"] = ffn.astype(np.float64)
    bad = bitwise_differences(drifted, chain_case(backend, case, "float32"))
    assert bad == ["layers.0.ffn_out: 1 of 32 values differ in their bits"], bad


class SwappedNormsInLayer(TorchBackend):
    """A second composition that drifted: the layer runs the two post-norm stage bodies swapped (LN2 where LN1
    belongs and back), while an isolated stage request still runs the right body."""

    def decoder_layer(self, *args, **kwargs):
        self.stage_runners = {**STAGE_RUNNERS, "post_attention_norm": STAGE_RUNNERS["post_ffn_norm"],
                              "post_ffn_norm": STAGE_RUNNERS["post_attention_norm"]}
        try:
            return super().decoder_layer(*args, **kwargs)
        finally:
            del self.stage_runners  # back to the class's table for isolated stages


def test_negative_control_two_stages_swapped_in_the_layer_is_caught():
    backend = SwappedNormsInLayer(device="cpu", num_threads=1)
    case = case_named("layer/tiny_cached_step")
    bad = bitwise_differences(backend.run_case(case, "float64"), chain_case(backend, case, "float64"))
    assert [b.split(":")[0] for b in bad] == ["layers.0.ffn_out", "layers.0.out1", "layers.0.out2"], bad
