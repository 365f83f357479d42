"""The model sections on the ``tiny`` preset: each quantity against an independent computation or an exact
structural fact, with a negative control."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy.special import expit

from pldr_ref import PLDRConfig, init_params, perturb_params
from pldr_ref.diagnostics.budget import (
    assemble_coefficient,
    iswiglu_derivative_envelope,
    power_factor,
    silu_derivative_envelope,
    spectral_norm,
)
from pldr_ref.diagnostics.commutant import eigenbasis_energy, rope_eigenbasis
from pldr_ref.diagnostics.contraction import row_map, row_map_jacobians
from pldr_ref.diagnostics.decoding import decoding_section, top2_margin
from pldr_ref.diagnostics.layernorm_scale import scale_error
from pldr_ref.diagnostics.model import SECTIONS, model_report
from pldr_ref.diagnostics.online import online_section
from pldr_ref.diagnostics.order import signed_mean_fluctuation
from pldr_ref.diagnostics.report import document, markdown
from pldr_ref.diagnostics.run import ModelOptions, final_row_forward, make_run, random_prompts
from pldr_ref.diagnostics.twirl import twirl_multiplier
from pldr_ref.diagnostics.twirl_energy import second_moment
from pldr_ref.model import forward
from pldr_ref.rope import apply_rope

OPTS = ModelOptions(decode_steps=4, op_steps=4, jacobian_rows=4, pool_rows=8, pairs=20)


@pytest.fixture(scope="module")
def run():
    c = PLDRConfig.preset("tiny")
    p = perturb_params(init_params(c, seed=0), seed=3)
    return make_run(p, random_prompts(c, 3, 10, seed=1), OPTS, "tiny (perturbed)")


def test_final_row_forward_equals_forward(run) -> None:
    logits, g = final_row_forward(run.params, run.ids)
    out = forward(run.params, run.ids)
    ref = out.logits[:, -1]
    assert np.max(np.abs(logits - ref)) <= 1e-13 * np.max(np.abs(ref))
    assert np.array_equal(g, np.stack([t.G_LM for t in out.layers]))


def test_row_map_jacobian_against_central_differences(run) -> None:
    """Analytic composite Jacobian vs central differences (step 1e-6, error O(h^2) ~ 1e-10 relative);
    negative control: a Jacobian of the wrong layer's weights is far off."""
    lp = run.params.layer(0)
    rng = np.random.Generator(np.random.PCG64(7))
    x = rng.standard_normal((3, 8))
    comp, units = row_map_jacobians(x, lp, run.config.eps_ln)
    h = 1e-6
    eye = np.eye(8)
    fd = (row_map(x[:, None, :] + h * eye, lp, run.config) - row_map(x[:, None, :] - h * eye, lp, run.config)) / (2 * h)
    fd = np.swapaxes(fd, -1, -2)  # [N, i, j] = d phi_i / d x_j
    assert np.max(np.abs(comp - fd)) <= 1e-7 * np.max(np.abs(fd))
    assert units.shape == (len(lp.res_units), 3, 8, 8)
    assert np.allclose(units[1] @ units[0], comp, rtol=0, atol=1e-12 * np.max(np.abs(comp)))
    wrong, _ = row_map_jacobians(x, run.params.layer(1), run.config.eps_ln)
    assert np.max(np.abs(wrong - fd)) > 1e-2 * np.max(np.abs(fd))


def test_layernorm_scale_error_matches_first_order_proxy() -> None:
    """gamma = 1, beta = 0: ||LN(r) - LN(r/S)|| / ||LN(r/S)|| = sqrt((v + S^2 eps)/(v + eps)) - 1 ~ eps/(2 v(r/S));
    with eps = 0 the error vanishes (scale invariance), the negative control."""
    rng = np.random.Generator(np.random.PCG64(8))
    rows = rng.standard_normal((50, 16)) * rng.uniform(1.0, 10.0, (50, 1))
    s = 40
    e = scale_error(rows, s, np.ones(16), np.zeros(16), 1e-6)
    v = np.var(rows, axis=-1)
    exact = np.abs(np.sqrt((v + s * s * 1e-6) / (v + 1e-6)) - 1.0)
    assert np.max(np.abs(e["direct_rel"] - exact)) <= 1e-9 * np.max(exact)
    assert np.max(np.abs(e["direct_rel"] - e["proxy"])) <= 2 * np.max(e["proxy"]) ** 2 + 1e-12
    zero = scale_error(rows, s, np.ones(16), np.zeros(16), 0.0)
    assert np.max(zero["direct_rel"]) <= 1e-14


def test_twirl_energy_of_a_constant_query_is_multiplier_squared() -> None:
    """q_p = q for every p: M_rot = (1/S) sum_p R_p q q^T R_p^T has eigenbasis energy m(omega_j - omega_k, S)^2
    times that of M_unrot, with the multiplier of :mod:`twirl`; the other layout's eigenbasis breaks it."""
    d, s, base = 8, 24, 100.0
    q = np.random.Generator(np.random.PCG64(9)).standard_normal(d)
    qs = np.broadcast_to(q, (s, d))
    for layout in ("interleaved", "half"):
        q_rot = apply_rope(qs, np.arange(s), layout=layout, base=base)
        u, omega = rope_eigenbasis(d, base, layout)
        eu, er = eigenbasis_energy(second_moment(qs), u), eigenbasis_energy(second_moment(q_rot), u)
        dw = omega[:, None] - omega[None, :]
        mult = np.where(dw == 0.0, 1.0, twirl_multiplier(np.where(dw == 0.0, 1.0, dw), s))
        assert np.max(np.abs(er - mult**2 * eu)) <= 1e-12 * np.max(eu)
        other = rope_eigenbasis(d, base, "half" if layout == "interleaved" else "interleaved")[0]
        bad = eigenbasis_energy(second_moment(q_rot), other)
        assert np.max(np.abs(bad - mult**2 * eigenbasis_energy(second_moment(qs), other))) > 1e-3 * np.max(eu)


def test_decoding_none_mode_is_exact_and_kv_g_is_not(run) -> None:
    """Mode ``none`` recomputes everything: eps_G = 0, dlogit at round-off, full agreement.
    Negative control: ``kv+g`` freezes the prompt's G, so the global Gram differs."""
    exact = decoding_section(dataclasses.replace(run, options=dataclasses.replace(OPTS, decode_mode="none")))
    # logits: the same layers, only the LM-head GEMM of the final row differs in summation order
    assert exact["dlogit"]["max"] <= 1e-13 * 10 and exact["eps_G"]["max"] == 0.0 and exact["argmax_agreement"] == 1.0
    cached = decoding_section(run)
    assert cached["dlogit"]["max"] > 1e-6 and max(cached["eps_G_max_by_layer"]) > 1e-6
    assert cached["criterion_2B_lt_margin_by_prompt"] == [
        2 * b < m for b, m in zip(cached["max_dlogit_by_prompt"], cached["min_margin_by_prompt"], strict=True)]
    logits = np.array([[1.0, 3.0, 2.5], [0.0, -1.0, 0.0]])
    assert top2_margin(logits).tolist() == [0.5, 0.0]


def test_online_contract_global_vs_cumulative_gram(run) -> None:
    rep = online_section(run)
    assert rep["repeatability_max_abs"] == 0.0
    assert rep["padding_at_gram_boundary"]["strip_restores_max_abs"] == 0.0
    assert rep["historical_rows_after_suffix_change"]["relative"] > 1e-6  # global Gram sees the suffix
    assert rep["padding_at_gram_boundary"]["random_tokens"]["final_row_relative"] > 1e-6
    c = dataclasses.replace(run.config, gram_mode="cumulative")
    p = perturb_params(init_params(c, seed=0), seed=3)
    cum = online_section(make_run(p, run.ids, OPTS))
    assert cum["historical_rows_after_suffix_change"]["relative"] <= 1e-12  # prefix consistent
    assert cum["block_vs_sequential"]["max_abs_logit_gap"] <= 1e-12 * 10
    assert rep["block_vs_sequential"]["max_abs_logit_gap"] > 1e-6  # negative control: global Gram


def test_signed_mean_statistic() -> None:
    a = np.array([1.0, 3.0])
    assert signed_mean_fluctuation(a, a) == 0.0
    b = np.array([2.0, 2.0])
    assert signed_mean_fluctuation(a, b) == pytest.approx(1.0 / 2.0, rel=1e-15)  # RMS(diff)=1, means 2
    assert signed_mean_fluctuation(np.array([1.0, -1.0]), np.array([2.0, -2.0])) == math.inf


def test_budget_envelopes_dominate_the_derivatives() -> None:
    """Analytic envelopes >= the true derivative sup on a fine grid; the envelope without its x^2 s' term fails."""
    for u in (0.5, 2.0, 8.0, 30.0):
        x = np.linspace(-u, u, 200001)
        s = expit(x)
        isw = np.abs(2 * x * s + x * x * s * (1 - s)).max()
        silu = np.abs(s + x * s * (1 - s)).max()
        assert iswiglu_derivative_envelope(u) >= isw and silu_derivative_envelope(u) >= silu
    x = np.linspace(-2.0, 2.0, 20001)
    s = expit(x)
    assert 2 * 2.0 * expit(2.0) < np.abs(2 * x * s + x * x * s * (1 - s)).max()


def test_budget_pieces_against_hand_computations() -> None:
    rng = np.random.Generator(np.random.PCG64(10))
    w = rng.standard_normal((3, 5, 7))
    assert np.allclose(spectral_norm(w), [np.linalg.norm(x, 2) for x in w], rtol=1e-12)
    big = rng.standard_normal((300, 400))
    assert abs(spectral_norm(big) - np.linalg.norm(big, 2)) <= 1e-12 * np.linalg.norm(big, 2)
    p = np.array([[[2.0, -1.0]]])
    assert power_factor(p, np.array([0.5]), np.array([3.0])).tolist() == [max(2 * 3.0, 1 * 0.5**-2)]
    layers = [dict(W_O=2.0, L_LN1=3.0, L_ffn=1.0, L_LN2=5.0, L_layer=7.0),
              dict(W_O=11.0, L_LN1=13.0, L_ffn=0.0, L_LN2=17.0, L_layer=19.0)]
    want = 0.5 * math.sqrt(4) * 23.0 * (2.0 * 3.0 * 2.0 * 5.0 * 19.0 + 11.0 * 13.0 * 1.0 * 17.0)
    assert assemble_coefficient(layers, 0.5, 4, 23.0) == pytest.approx(want, rel=1e-15)
    # negative control: a downstream-only assembly (no same-layer remainder) gives a different value
    assert assemble_coefficient(layers, 0.5, 4, 23.0) != pytest.approx(
        0.5 * 2 * 23.0 * (2.0 * 7.0 + 11.0), rel=1e-6)


def test_model_report_all_sections_json_and_markdown(run) -> None:
    rep = model_report(run)
    assert list(rep["sections"]) == list(SECTIONS)
    doc = document("model", rep)
    text = json.dumps(doc, allow_nan=False)
    back = json.loads(text)
    assert back["schema_version"] == 1 and back["kind"] == "model"
    md = markdown(back)
    assert all(f"## {name}" in md for name in SECTIONS)
    dag = back["sections"]["dag"]["A_LM"]["summary"]
    assert dag["min"] >= math.log1p(run.config.eps_adj**2) * 0.5  # A_LM >= eps_adj entrywise
    lay = back["sections"]["layernorm"]
    assert lay["applicable"] and lay["direct_rel"]["max"] > 0.0
    with pytest.raises(ValueError, match="unknown section"):
        model_report(run, ("spectra", "nope"))


def test_bad_inputs() -> None:
    c = PLDRConfig.preset("tiny")
    p = init_params(c, seed=0)
    with pytest.raises(ValueError, match="pad id"):
        make_run(p, np.array([[0, 1, 2]]))
    with pytest.raises(ValueError, match="max_seq_len"):
        random_prompts(c, 2, c.max_seq_len + 1)
    with pytest.raises(ValueError, match="op_seeds"):
        ModelOptions(op_seeds=(1, 1))
    with pytest.raises(ValueError, match="decode_steps"):
        ModelOptions(decode_steps=0)


@pytest.mark.parametrize("mode", ["kv+g", "kv", "g", "none", "hf"])
def test_prompt_state_equals_prefill(run, mode: str) -> None:
    """The decode state built from the traced prompt pass is the one ``prefill`` fills (all prompts: bitwise)."""
    from pldr_ref.diagnostics.run import prompt_state
    from pldr_ref.inference.modes import prefill, resolve_mode

    m = resolve_mode(mode)
    logits, state = prompt_state(run, m, run.ids.shape[0])
    step, ref = prefill(run.params, run.ids, m)
    assert np.array_equal(logits, step.logits[:, -1]) and np.array_equal(state.ids, ref.ids)
    assert (state.kv_cache is None) == (ref.kv_cache is None) and (state.g_cache is None) == (ref.g_cache is None)
    if ref.kv_cache is not None:
        for a, b in zip(state.kv_cache.layers, ref.kv_cache.layers, strict=True):
            assert np.array_equal(a.k_rot, b.k_rot) and np.array_equal(a.v, b.v) and np.array_equal(a.A, b.A)
        assert np.array_equal(state.kv_cache.key_padding, ref.kv_cache.key_padding)
    if ref.g_cache is not None:
        for a, b in zip(state.g_cache.layers, ref.g_cache.layers, strict=True):
            assert np.array_equal(a.G_LM, b.G_LM) and np.array_equal(a.A_P, b.A_P)


def test_order_parameter_continuations_are_generate_samples(run, monkeypatch) -> None:
    """The protocol's sampled continuations are those of ``pldr_ref.inference.generate`` (kv+g, same seeds);
    negative control: the two seeds give different continuations."""
    from pldr_ref.diagnostics import order
    from pldr_ref.inference import SamplingConfig, generate

    seen = []
    real = order.layer_pass

    def spy(params, ids):
        seen.append(ids)
        return real(params, ids)

    monkeypatch.setattr(order, "layer_pass", spy)
    rep = order.order_parameter_section(run)
    for ids, seed in zip(seen, OPTS.op_seeds, strict=True):
        want = generate(run.params, run.ids, OPTS.op_steps, mode="kv+g", sampling=SamplingConfig("sample"),
                        seed=seed).sequences
        assert np.array_equal(ids, want)
    assert not np.array_equal(seen[0], seen[1])
    assert rep["A"]["rms"]["max"] > 0.0
