"""The torch backend: direct agreement with ``pldr_ref.forward`` / ``pldr_ref.inference``, and the
acceptance run of the harness on the committed golden suite (float64, float32, bfloat16)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the optional torch extra")

from pldr_ref import PLDRConfig, forward, init_params, perturb_params  # noqa: E402
from pldr_ref.backends.torch_backend import TorchBackend  # noqa: E402
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, iter_cases  # noqa: E402
from pldr_ref.harness.validate import validate  # noqa: E402
from pldr_ref.inference import cached_forward  # noqa: E402

pytestmark = pytest.mark.torch

CONFIGS = {
    "tiny": PLDRConfig.preset("tiny"),
    "tiny_half_f32rope_additive": PLDRConfig.preset("tiny", rope_layout="half", rope_precision="float32",
                                                    mask_mode="additive", embed_scale_precision="float32"),
    "tiny_v900_finfo": PLDRConfig.preset("tiny", metric_learner="v900", A_dff_depth=12, mask_mode="finfo_min"),
    "tiny_cumulative": PLDRConfig.preset("tiny", gram_mode="cumulative"),
    "small_identity_g": PLDRConfig.preset("small", g_mode="identity", metric_learner="none", num_reslayerA=0),
    "d_k2_one_head": PLDRConfig(num_layers=1, num_heads=1, d_k=2, dff=6, A_dff=3, num_reslayerA=1, num_denseA=1,
                                vocab_size=16, max_seq_len=8),
}


@pytest.fixture(scope="module")
def backend():
    before = torch.get_num_threads()
    yield TorchBackend(device="cpu", num_threads=1)  # tiny tensors: one thread avoids pool overhead
    torch.set_num_threads(before)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_forward_matches_reference_in_float64(backend, name):
    cfg = CONFIGS[name]
    params = perturb_params(init_params(cfg, 3), 4)
    ids = np.array([[3, 5, 7, 1, 0, 0], [2, 9, 4, 4, 8, 1]]) % cfg.vocab_size
    ref = forward(params, ids).flat()
    got = backend.numpy_dict(backend.forward(backend.params(params, torch.float64), cfg, ids))
    assert set(got) == set(ref)
    assert _rel(got["logits"], ref["logits"]) <= 1e-12
    for k in ref:
        assert np.allclose(got[k], ref[k], rtol=1e-9, atol=1e-11), k


def test_single_token_sequence(backend):
    cfg = CONFIGS["d_k2_one_head"]
    params = perturb_params(init_params(cfg, 1), 2)
    ids = np.array([[5]])
    ref = forward(params, ids).logits
    got = backend.numpy_dict(backend.forward(backend.params(params, torch.float64), cfg, ids))["logits"]
    assert _rel(got, ref) <= 1e-12


@pytest.mark.parametrize("name", ["tiny", "tiny_cumulative"])
def test_cached_steps_match_reference_inference(backend, name):
    cfg = CONFIGS[name]
    params = perturb_params(init_params(cfg, 5), 6)
    prompt, new = np.array([[3, 9, 4, 7]]), np.array([[5], [8]])
    ref_step = cached_forward(params, prompt)
    P = backend.params(params, torch.float64)
    trace, kv, g = backend.step(P, cfg, prompt)
    assert _rel(backend.numpy_dict(trace)["logits"], ref_step.logits) <= 1e-12
    ref_kv, ref_g = ref_step.kv_cache, None if name == "tiny_cumulative" else ref_step.g_cache
    for tok in new:
        ref_step = cached_forward(params, tok[None], kv_cache=ref_kv, g_cache=ref_g)
        trace, kv, _ = backend.step(P, cfg, tok[None], kv=kv, g_cache=g if ref_g is not None else None,
                                    cached_step=True)
        got = backend.numpy_dict(trace)
        ref = ref_step.output.flat()
        assert _rel(got["logits"], ref["logits"]) <= 1e-12
        assert np.array_equal(got["layers.0.k_rot"].shape, ref["layers.0.k_rot"].shape)
        ref_kv = ref_step.kv_cache


def test_lower_precisions_are_close_but_not_exact(backend):
    """Negative control for the comparisons above: float32 / bfloat16 runs differ from float64 by about
    their unit roundoff times a modest factor -- so the 1e-12 checks are not vacuous."""
    cfg = CONFIGS["tiny"]
    params = perturb_params(init_params(cfg, 3), 4)
    ids = np.array([[3, 5, 7, 1]])
    ref = forward(params, ids).logits
    errs = {}
    for dt in (torch.float32, torch.bfloat16):
        errs[dt] = _rel(backend.numpy_dict(backend.forward(backend.params(params, dt), cfg, ids))["logits"], ref)
    assert 1e-9 < errs[torch.float32] < 1e-3
    assert errs[torch.float32] < errs[torch.bfloat16] < 0.5


def test_missing_torch_gives_a_clear_error(monkeypatch):
    import builtins

    from pldr_ref.backends import torch_backend

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match="pldr-ref\\[torch\\]"):
        torch_backend.import_torch()


# ----------------------------------------------------------------------------- acceptance on the golden suite
#: The lower-precision dtypes of the acceptance run.
LOW_DTYPES = ("float32", "bfloat16", "float16")
#: Cases whose float32 / bfloat16 / float16 runs take 45 % of the default run's low-precision time (the
#: v510-110m-width five-layer trained-G_LM case alone a third; the largest model and the 1024-row case): their
#: low-precision runs are checked by the slow :func:`test_lower_precision_passes_under_the_policy_on_the_large_cases`
#: (their float64 runs stay in the default run, and the other model, g_mode and long-row cases keep every group
#: judged in every dtype there).
LOW_PRECISION_SLOW_CASES = ("g_mode/external_pldrv51_110m_1", "model/medium", "model/rows_s1024_learned_g")


def _golden_cases() -> list:
    if not (DEFAULT_GOLDEN_DIR / "MANIFEST.json").is_file():
        raise FileNotFoundError(f"the committed golden suite is missing at {DEFAULT_GOLDEN_DIR}")
    return [c for c in iter_cases(DEFAULT_GOLDEN_DIR) if not _is_switch_case(c.name)]


@pytest.fixture(scope="module")
def suite_results(backend):
    """(cases, results): every non-switch case in float64; in the lower dtypes every case except
    :data:`LOW_PRECISION_SLOW_CASES`."""
    cases = _golden_cases()
    assert set(LOW_PRECISION_SLOW_CASES) <= {c.name for c in cases}
    low = [c for c in cases if c.name not in LOW_PRECISION_SLOW_CASES]
    return cases, validate(backend, cases, ["float64"]) + validate(backend, low, list(LOW_DTYPES))


def _is_switch_case(name: str) -> bool:
    """Issue-12 emulation-switch cases: the torch backend implements none of those switch values."""
    return name.split("/", 1)[1].startswith(("switch_", "emulate_"))


def test_switch_cases_are_declared_unsupported(backend):
    """The torch backend declares the issue-12 switches at their defaults (DEFAULT_EMULATION_SWITCHES), so every
    switch case is reported unsupported with the switch named -- never run with default semantics and passed."""
    cases = [c for c in iter_cases(DEFAULT_GOLDEN_DIR) if _is_switch_case(c.name)]
    assert len(cases) >= 20
    results = validate(backend, cases, ["float64"])
    assert all(r.status == "unsupported" and ("not supported" in r.reason) for r in results), \
        [(r.case, r.status, r.reason) for r in results if r.status != "unsupported"]


def test_float64_passes_every_case_and_every_stage(suite_results):
    cases, results = suite_results
    r64 = [r for r in results if r.dtype == "float64"]
    assert len(r64) == len(cases)
    bad = [(r.case, r.status, r.reason) for r in r64 if r.status != "pass"]
    assert not bad
    stages = [s for r in r64 for s in r.stages]
    assert stages and all(s.status == "pass" for s in stages)
    assert {s.stage for s in stages} >= {"embedding", "input_norm", "rope", "density_operator", "metric_learner",
                                         "metric_tensor", "potential_tensor", "energy_curvature",
                                         "attention_scores", "masked_softmax", "value_mix", "lm_head"}


def _one_ulp_sensitivity(case) -> float:
    """max relative change of the reference logits when every parameter is scaled by (1 +- 2^-52) with
    random signs: the float64 conditioning floor no implementation can beat."""
    from pldr_ref.fixtures.runners import run_kind
    from pldr_ref.params import Params

    worst = 0.0
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        p2 = Params(case.params.config, {k: v * (1 + rng.choice([-1.0, 1.0], v.shape) * 2.0**-52)
                                         for k, v in case.params.items()})
        out = run_kind(case.kind, case.config, p2, case.args, case.inputs)["logits"]
        worst = max(worst, _rel(out, case.outputs["logits"]))
    return worst


def test_float64_model_logits_within_1e12_relative(suite_results):
    """Model-level logits agree within 1e-12 relative (normwise) -- except where the case's own float64
    conditioning is worse: there the error must stay within 2x the reference's response to 1-ulp
    parameter perturbations, and such cases are listed explicitly (docs/tolerances.md)."""
    cases, results = suite_results
    by_name = {c.name: c for c in cases}
    seen, above = 0, []
    for r in results:
        if r.dtype != "float64" or r.group not in ("model", "g_mode"):
            continue
        (logits,) = [o for o in r.outputs if o.name == "logits"]
        err = logits.comparison.max_rel_normwise
        if err > 1e-12:
            floor = _one_ulp_sensitivity(by_name[r.case])
            assert floor > 1e-12 and err <= 2 * floor, (r.case, err, floor)
            above.append(r.case)
        seen += 1
    assert seen >= 8
    assert set(above) <= {"model/medium"}, above


@pytest.mark.parametrize("dtype", LOW_DTYPES)
def test_lower_precision_passes_under_the_policy(suite_results, dtype):
    """The mixed-precision control (16-bit storage and matmul inputs, float32 accumulation and elementwise)
    never fails: no fail or error anywhere, so the run exits 0 in every dtype (issue 19); a case whose primary
    output the dtype cannot judge is "not covered" (not_judgeable, never a pass), the additive left-padded ones are
    judged on their representable part."""
    cases, results = suite_results
    rs = [r for r in results if r.dtype == dtype]
    _check_lower_precision([c for c in cases if c.name not in LOW_PRECISION_SLOW_CASES], rs, dtype)
    assert sum(r.status == "pass" for r in rs if r.group in ("model", "layer", "g_mode")) >= 8


@pytest.mark.slow
@pytest.mark.parametrize("dtype", LOW_DTYPES)
def test_lower_precision_passes_under_the_policy_on_the_large_cases(backend, dtype):
    """:func:`test_lower_precision_passes_under_the_policy` on :data:`LOW_PRECISION_SLOW_CASES`."""
    cases = [c for c in _golden_cases() if c.name in LOW_PRECISION_SLOW_CASES]
    assert len(cases) == len(LOW_PRECISION_SLOW_CASES)
    _check_lower_precision(cases, validate(backend, cases, [dtype]), dtype)


def _check_lower_precision(cases: list, rs: list, dtype: str) -> None:
    """No fail, error or unsupported in ``rs`` (the results of ``cases`` in ``dtype``), the run passes, every
    model / layer / g_mode case passes or says why it is not judged."""
    from pldr_ref.harness.report import passed

    assert len(rs) == len(cases) and rs
    assert not [(r.case, r.reason) for r in rs if r.status in ("fail", "error", "unsupported")]
    assert passed(rs)
    by = {r.case: r for r in rs}
    for c in cases:
        if c.group in ("model", "layer", "g_mode"):
            r = by[c.name]
            assert r.status in ("pass", "not_judgeable", "not_applicable"), (c.name, dtype, r.reason)
            if "left_pad_additive" in c.name and r.status == "pass":
                assert "excluded: fully masked rows not representable in " + dtype in r.reason, (c.name, r.reason)
    # what is not judged says why
    for r in rs:
        if r.status in ("not_applicable", "not_judgeable"):
            assert r.reason, r.case
            notes = [o.note for o in r.outputs if o.status in ("not_applicable", "not_judgeable")]
            assert all(notes), r.case


def test_well_conditioned_cases_are_judged_end_to_end_in_every_dtype(suite_results):
    """Item 1(d): the identity-G model and layer cases have their primary outputs judged (not merely covered)
    end to end in float32, bfloat16 and float16."""
    _, results = suite_results
    for r in results:
        if r.case in ("model/tiny_identity_g_short", "layer/tiny_identity_g") and r.dtype != "float64":
            prim = [o for o in r.outputs if o.name in ("logits", "layers.0.out2")]
            assert prim and all(o.status == "pass" for o in prim), (r.case, r.dtype, [o.note for o in prim])


# ----------------------------------------------------------------------------- property: random small models
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def small_models(draw):
    """Edge shapes: one head, d_k = 2, S = 1, B = 1, every switch."""
    ml = draw(st.sampled_from(["v500", "v900"]))
    cfg = PLDRConfig(
        num_layers=draw(st.integers(1, 2)), num_heads=draw(st.integers(1, 2)), d_k=draw(st.sampled_from([2, 4])),
        dff=draw(st.integers(1, 8)), A_dff=draw(st.integers(1, 5)), num_reslayerA=draw(st.integers(0, 2)),
        num_denseA=draw(st.integers(1, 2)), vocab_size=16, max_seq_len=8,
        A_dff_depth=draw(st.integers(1, 6)) if ml == "v900" else 0, metric_learner=ml,
        rope_layout=draw(st.sampled_from(["interleaved", "half"])),
        rope_precision=draw(st.sampled_from(["exact", "float32"])),
        mask_mode=draw(st.sampled_from(["ideal", "additive", "finfo_min"])),
        gram_mode=draw(st.sampled_from(["global", "cumulative"])),
    )
    b, s = draw(st.integers(1, 2)), draw(st.integers(1, 5))
    ids = np.array(draw(st.lists(st.integers(0, 15), min_size=b * s, max_size=b * s))).reshape(b, s)
    return cfg, draw(st.integers(0, 2**16)), ids


@given(model=small_models())
def test_property_torch_float64_matches_reference(backend, model):
    cfg, seed, ids = model
    params = perturb_params(init_params(cfg, seed), seed + 1)
    ref = forward(params, ids, check_finite_values=False).flat()
    got = backend.numpy_dict(backend.forward(backend.params(params, torch.float64), cfg, ids))
    assert set(got) == set(ref)
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-9, atol=1e-10, err_msg=k)
