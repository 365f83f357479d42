"""Backend protocol, tolerance policy and verdict rules (no torch needed)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pldr_ref.backends.numpy32 import Numpy32Backend
from pldr_ref.backends.reference import ReferenceBackend
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.harness.policy import tolerance
from pldr_ref.harness.protocol import (
    SWITCHES,
    Capabilities,
    Unsupported,
    differing_switches,
    every_value,
    load_backend,
    unsupported_reason,
)
from pldr_ref.harness.validate import validate, validate_case
from pldr_ref.harness.verdict.localize import judge


@pytest.fixture(scope="module")
def tiny_case():
    return load_case(DEFAULT_GOLDEN_DIR / "model" / "tiny_exact")


# ----------------------------------------------------------------------------- loading
class NotABackend:
    name = "x"


def test_load_backend_accepts_class_instance_and_factory(monkeypatch):
    import pldr_ref.backends.reference as module

    instance = ReferenceBackend()
    monkeypatch.setattr(module, "INSTANCE", instance, raising=False)
    monkeypatch.setattr(module, "make_backend", ReferenceBackend, raising=False)
    monkeypatch.setattr(module, "NotABackend", NotABackend, raising=False)
    assert isinstance(load_backend("pldr_ref.backends.reference:ReferenceBackend"), ReferenceBackend)
    assert load_backend("pldr_ref.backends.reference:INSTANCE") is instance
    assert isinstance(load_backend("pldr_ref.backends.reference:make_backend"), ReferenceBackend)
    with pytest.raises(ValueError, match="lacks capabilities, run_case"):
        load_backend("pldr_ref.backends.reference:NotABackend")


@pytest.mark.parametrize("spec, match", [
    ("pldr_ref.backends.reference", "MODULE:ATTR"),
    ("no.such.module:X", "cannot import"),
    ("pldr_ref.backends.reference:Missing", "no attribute"),
])
def test_load_backend_errors_name_the_problem(spec, match):
    with pytest.raises(ValueError, match=match):
        load_backend(spec)


def test_capabilities_reject_unknown_values():
    with pytest.raises(ValueError, match="dtype"):
        Capabilities(dtypes=("float8",), kinds=())
    with pytest.raises(ValueError, match="cache"):
        Capabilities(dtypes=("float64",), kinds=(), caches=("paged",))
    with pytest.raises(ValueError, match="switch"):
        Capabilities(dtypes=("float64",), kinds=(), switches={"colour": ("red",)})


# ----------------------------------------------------------------------------- declared and runtime verdicts
class LimitedBackend(ReferenceBackend):
    """Reference numbers, but declares interleaved RoPE only and no stages."""

    name = "limited"

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return dataclasses.replace(caps, stages=(), switches={"rope_layout": ("half",)})


class RaisingBackend(ReferenceBackend):
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def run_case(self, case, dtype):
        raise self.exc


class PrimaryOnlyBackend(ReferenceBackend):
    """Returns only the logits and declares full_trace=False; ``drop_logits`` also drops them."""

    def __init__(self, drop_logits: bool = False) -> None:
        self.drop_logits = drop_logits

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities(), full_trace=False)

    def run_case(self, case, dtype):
        out = super().run_case(case, dtype)
        return {} if self.drop_logits else {"logits": out["logits"]}


def test_an_undeclared_switch_means_its_default_only() -> None:
    """A backend that declares no switch supports the defaults only: a case with non-default values is unsupported
    and the reason names every differing switch, declared or not (issue 32: a switch added later is never claimed
    by a backend written before it)."""
    import types

    from pldr_ref.config import PLDRConfig

    caps = Capabilities(dtypes=("float32",), kinds=("forward",), switches={"mask_mode": ("ideal", "additive")})
    backend = types.SimpleNamespace(name="b", capabilities=lambda: caps)
    config = PLDRConfig.preset("tiny", rope_layout="half", mask_mode="finfo_min", masked_row="zeros")
    case = types.SimpleNamespace(kind="forward", config=config, inputs={}, args={})
    assert unsupported_reason(backend, case, "float32") == (
        "rope_layout='half' not supported (not declared: its default 'interleaved' only); "
        "mask_mode='finfo_min' not supported (declared: ideal, additive); "
        "masked_row='zeros' not supported (not declared: its default 'arithmetic' only)")
    assert caps.g_modes == ("learned",) and caps.supported("gram_mode") == ("global",)
    # negative controls: the defaults (and a declared value) run; declaring every value claims them all
    plain = types.SimpleNamespace(kind="forward", config=PLDRConfig.preset("tiny", mask_mode="additive"),
                                  inputs={}, args={})
    assert unsupported_reason(backend, plain, "float32") is None
    assert differing_switches(dataclasses.replace(caps, switches=every_value(*SWITCHES)), config) == []
    with pytest.raises(ValueError, match=r"unknown switch.*colour"):
        every_value("colour")


def test_declared_switch_is_unsupported_with_reason(tiny_case):
    why = unsupported_reason(LimitedBackend(), tiny_case, "float64")
    assert why is not None and "rope_layout='interleaved'" in why
    r = validate_case(LimitedBackend(), tiny_case, "float64")
    assert r.status == "unsupported" and "rope_layout" in r.reason


def test_runtime_unsupported_and_crash_are_distinct_verdicts(tiny_case):
    r = validate_case(RaisingBackend(Unsupported("no G cache here")), tiny_case, "float64")
    assert (r.status, r.reason) == ("unsupported", "no G cache here")
    r = validate_case(RaisingBackend(RuntimeError("boom")), tiny_case, "float64")
    assert r.status == "error" and "RuntimeError: boom" in r.reason


def test_partial_trace_is_declared_and_primary_output_required(tiny_case):
    r = validate_case(PrimaryOnlyBackend(), tiny_case, "float64", isolate=False)
    assert r.status == "pass"
    statuses = {o.name: o.status for o in r.outputs}
    assert statuses["logits"] == "pass" and statuses["x0"] == "not_produced"
    r = validate_case(PrimaryOnlyBackend(drop_logits=True), tiny_case, "float64", isolate=False)
    assert r.status == "fail" and {o.name: o.status for o in r.outputs}["logits"] == "missing"


def test_backend_without_isolation_is_reported_as_such(tiny_case):
    r = validate_case(LimitedBackend(), tiny_case.__class__(**{**tiny_case.__dict__,
                                                               "config": tiny_case.config.replace(rope_layout="half")}),
                      "float64")
    # the config says half (declared): it runs, but the golden numbers are interleaved ones -> fail,
    # and the single stage row says isolation is unsupported
    assert r.stages[0].status == "unsupported" and "no isolated stages" in r.stages[0].note


# ----------------------------------------------------------------------------- tolerance policy
def test_k_factors_follow_the_documented_rule():
    assert tolerance.k_factor("bfloat16", 10_000) == tolerance.K_HALF
    assert tolerance.k_factor("float16", 1) == tolerance.K_HALF
    assert tolerance.k_factor("float32", 1) == tolerance.K_MIN
    assert tolerance.k_factor("float32", 400) == pytest.approx(tolerance.K_SQRT * 20)
    with pytest.raises(ValueError):
        tolerance.k_factor("float64", 10)


def test_baseline_allowance_and_not_judged_cases():
    g = np.array([1.0, -4.0, 2.0])
    a = tolerance.ensemble_allowance("bfloat16", g, 0.01, 16, source="t")
    floor = tolerance.FLOOR_UNITS * 2.0**-8 * 4.0  # u(bfloat16) = 2^-8
    assert a.judged and a.atol == pytest.approx(tolerance.K_HALF * 0.01 + floor) and a.rtol == 0
    n = tolerance.ensemble_allowance("float16", g, None, 16, source="t")
    assert not n.judged and "non-finite" in n.reason
    b = tolerance.output_allowance(None, "mask", "float32", np.array([True]), 0.0)
    assert (b.atol, b.rtol) == (0.0, 0.0)


def test_float64_uses_the_case_tolerance(tiny_case):
    atol, rtol = tiny_case.output_tolerance("logits")
    a = tolerance.output_allowance(tiny_case, "logits", "float64", tiny_case.outputs["logits"], None)
    assert (a.atol, a.rtol) == (atol, rtol)


def test_judge_passes_inside_and_fails_outside_the_allowance():
    g = np.linspace(-1, 1, 50)
    allow = tolerance.ensemble_allowance("float32", g, tolerance.ErrorStats(1e-7, 1e-6, 0.0, 0.0, g.size), 4,
                                         source="t")
    inside = judge("t", "s", g, g + 0.5 * allow.atol, "float32", allow)
    outside = judge("t", "s", g, g + 2.0 * allow.atol, "float32", allow)
    nan = judge("t", "s", g, np.where(g > 0.9, np.nan, g), "float32", allow)
    assert inside.status == "pass" and outside.status == "fail" and nan.status == "fail"
    assert outside.comparison.mismatches == g.size and nan.comparison.nan_mismatches > 0


# ----------------------------------------------------------------------------- numpy32
def test_numpy32_passes_float32_and_declares_the_rest():
    from pldr_ref.fixtures.case import iter_cases

    cases = [c for c in iter_cases(DEFAULT_GOLDEN_DIR) if c.group in ("model", "layer", "g_mode", "op")]
    results = validate(Numpy32Backend(), cases, ["float32", "bfloat16"])
    f32 = {r.case: r for r in results if r.dtype == "float32"}
    assert not [r.case for r in f32.values() if r.status in ("fail", "error")]
    switch = [c for c in cases if c.name.split("/", 1)[1].startswith(("switch_", "emulate_"))
              and c.name != "model/switch_position_ids"]
    # issue-12 switch values numpy32 does not implement are declared (unsupported), never run with wrong semantics
    assert switch and all(f32[c.name].status in ("unsupported", "not_applicable") for c in switch)
    # per-row position_ids (an input, at the default switch values) numpy32 takes
    assert f32["model/switch_position_ids"].status == "pass"
    layered = [c for c in cases if c.kind in ("forward", "decoder_layer") and c not in switch]
    # a case whose float32 logits the ensemble cannot resolve (model/medium) is not covered: never a pass, no fail
    assert all(f32[c.name].status in ("pass", "not_judgeable") for c in layered)
    assert sum(f32[c.name].status == "pass" for c in layered) >= len(layered) - 2
    # the fully masked rows of an additive -1e9 mask are absorbed in float32: judged on the representable part
    assert all("excluded: fully masked rows not representable in float32" in f32[c.name].reason
               for c in layered if "left_pad_additive" in c.name)
    assert all(f32[c.name].status == "unsupported" for c in cases if c.kind not in ("forward", "decoder_layer"))
    assert all(r.status == "unsupported" and "bfloat16" in r.reason for r in results if r.dtype == "bfloat16")
    stage_rows = [s for r in f32.values() for s in r.stages]
    assert stage_rows and all(s.status == "unsupported" for s in stage_rows)


# ----------------------------------------------------------------------------- localization without torch
class WrongStageBackend(ReferenceBackend):
    """Correct end to end, but its isolated ``ffn`` stage is off by 1e-6 (a bug only isolation can see)."""

    def run_stage(self, request):
        out = super().run_stage(request)
        return {k: v + 1e-6 for k, v in out.items()} if request.stage == "ffn" else out


class WrongOutputBackend(ReferenceBackend):
    """Corrupts layer 1's softmax output (and everything after it) end to end; isolated stages are correct."""

    def run_case(self, case, dtype):
        out = super().run_case(case, dtype)
        for k in out:
            if k == "layers.1.E" or k.startswith(("layers.1.ctx", "layers.1.attn", "layers.1.out", "layers.1.ffn")) \
                    or k == "logits":
                out[k] = out[k] * (1 + 1e-6)
        return out


def test_isolation_finds_a_stage_bug_invisible_end_to_end(tiny_case):
    r = validate_case(WrongStageBackend(), tiny_case, "float64")
    assert r.status == "fail"
    assert r.first_failure["stage"] == "ffn" and r.first_failure["layer"] == 0
    assert r.first_failure["found_by"] == "isolation"
    assert all(o.status == "pass" for o in r.outputs)


def test_end_to_end_divergence_names_the_first_bad_output(tiny_case):
    r = validate_case(WrongOutputBackend(), tiny_case, "float64")
    assert r.status == "fail"
    f = r.first_failure
    assert (f["stage"], f["layer"], f["output"], f["found_by"]) == ("masked_softmax", 1, "layers.1.E", "end_to_end")
    # the stage passes in isolation: the report says the divergence is between stages and names the neighbours
    assert f["note"].startswith("stage correct in isolation; divergence between stages")
    assert "layers.1.attention_scores -> layers.1.masked_softmax -> layers.1.value_mix" in f["note"]
