"""``pldr-ref accuracy`` with the arb engine and ``--preset``; the full-suite exact case of the real architecture."""

from __future__ import annotations

import argparse
import contextlib
import io

import numpy as np
import pytest

from pldr_ref.exact import accuracy
from pldr_ref.fixtures.suite import build_suite
from pldr_ref.model import forward


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="pldr-ref")
    sub = parser.add_subparsers(dest="command")
    accuracy.register(sub)
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = args.func(args)
    return code, out.getvalue(), err.getvalue()


def _tables(report: str) -> list[str]:
    return [line for line in report.splitlines() if line.startswith("|")]


def test_arb_engine_report_equals_mpmath_report() -> None:
    base = ["accuracy", "--configs", "tiny,tiny-cumulative", "--seeds", "0", "--seq-len", "4", "--quiet"]
    code_a, arb_text, err = run_cli([*base, "--engine", "arb"])
    code_m, mp_text, _ = run_cli(base)
    assert code_a == code_m == 0 and err == ""
    # both engines give the correctly rounded values, so every error statistic is identical
    assert _tables(arb_text) == _tables(mp_text) and len(_tables(arb_text)) > 40
    assert "engine arb" in arb_text and "engine mpmath" in mp_text
    n = sum(v.size for name in ("tiny", "tiny-cumulative")
            for v in forward(*accuracy.case_inputs(accuracy.named_config(name), 0, 4)).flat().values())
    assert f"certified correctly rounded: {n}/{n} values (100.00 %)" in arb_text
    assert "certified" not in mp_text  # negative control: the mpmath engine has no certificates


def test_preset_report_out_file_and_progress(tmp_path) -> None:
    path = tmp_path / "report.md"
    code, out, err = run_cli(["accuracy", "--preset", "tiny", "--seq-len", "5", "--engine", "arb", "--out", str(path)])
    assert code == 0 and out == ""
    text = path.read_text()
    assert "preset: tiny; seeds: 0; batch 1, seq_len 5; engine arb" in text
    assert "### tiny" in text and "| logits | 320 |" in text  # B 1 x S 5 x vocab 64
    assert "100.00 %" in text
    assert "accuracy tiny:" in err  # progress lines on stderr (not a terminal)
    code, out, err = run_cli(["accuracy", "--preset", "tiny", "--seq-len", "5", "--batch", "2", "--quiet"])
    assert code == 0 and err == "" and "batch 2" in out and "| logits | 640 |" in out


def test_set_overrides_config_fields() -> None:
    code, out, _ = run_cli(["accuracy", "--preset", "tiny", "--set", "rope_layout=half", "--set", "attn_bias=false",
                            "--seq-len", "3", "--quiet"])
    assert code == 0 and "preset: tiny, rope_layout=half, attn_bias=False;" in out
    base = run_cli(["accuracy", "--preset", "tiny", "--seq-len", "3", "--quiet"])[1]
    assert _tables(out) != _tables(base)  # the override reaches the model
    with pytest.raises(SystemExit):
        run_cli(["accuracy", "--preset", "tiny", "--set", "no_such_field=1"])
    with pytest.raises(SystemExit):
        run_cli(["accuracy", "--preset", "tiny", "--set", "num_layers=two"])
    assert run_cli(["accuracy", "--preset", "tiny", "--set", "rope_layout=diagonal", "--quiet"])[0] == 2
    assert run_cli(["accuracy", "--configs", "tiny", "--set", "rope_layout=half", "--quiet"])[0] == 2


def test_bad_options() -> None:
    assert run_cli(["accuracy", "--preset", "tiny", "--batch", "0", "--quiet"])[0] == 2
    assert run_cli(["accuracy", "--configs", "tiny", "--batch", "3", "--quiet"])[0] == 2
    with pytest.raises(SystemExit):
        run_cli(["accuracy", "--preset", "huge"])
    with pytest.raises(SystemExit):
        run_cli(["accuracy", "--engine", "flint"])


def test_full_suite_has_the_real_architecture_exact_case() -> None:
    full = {c.name: c for c in build_suite("full")}
    default = {c.name for c in build_suite("default")}
    spec = full["model/v510_110m_s16_exact"]
    assert spec.name not in default and not spec.committed
    assert spec.tier == "exact" and spec.args == {"engine": "arb"} and spec.kind == "forward"
    assert (spec.config.d_model, spec.config.num_layers, spec.config.vocab_size) == (896, 5, 32000)
    ids = spec.inputs()["token_ids"]
    assert ids.shape == (1, 16) and ids.min() >= 1 and ids.max() < 32000
    assert np.array_equal(ids, spec.inputs()["token_ids"])  # deterministic stream


@pytest.mark.slow
def test_real_architecture_exact_case_is_certified() -> None:
    from pldr_ref.exact.arb import forward_certified
    from pldr_ref.fixtures.build import spec_params

    spec = next(c for c in build_suite("full") if c.name == "model/v510_110m_s16_exact")
    params, _ = spec_params(spec)
    ids = spec.inputs()["token_ids"]
    res = forward_certified(params, ids)
    assert res.all_certified
    f64 = forward(params, ids).flat()
    assert list(res.values) == list(f64)
    assert params.config.rope_arithmetic_dtype == "float32"  # q and k are rounded to float32 before RoPE
    flips = float32_rounding_flips(f64, res.values, params.config.num_layers)
    if not flips:
        logits = res.values["logits"]
        assert np.max(np.abs(f64["logits"] - logits)) <= 1e-10 * np.max(np.abs(logits))
        return
    # A float32 rounding flip: the float64 q or k lies on the other side of a float32 rounding boundary than the
    # exact one (a last-bit difference of the float64 path, which another BLAS can change, moves it there).
    # From there on both paths are legitimate and differ by a float32 ulp, which the power A_LM^P amplifies;
    # every stage before the first flipped layer's rotation must still be float64-accurate.
    first = min(layer for layer, _ in flips)
    for stage in (s for layer, s in flips if layer == first):
        a, b = f64[f"layers.{first}.{stage}"], res.values[f"layers.{first}.{stage}"]
        assert np.max(np.abs(a - b)) <= 1e-12 * np.max(np.abs(b))  # a float64-sized difference, nothing more
    order = list(f64)
    for name in order[: order.index(f"layers.{first}.q_rot")]:
        want = res.values[name]
        assert np.max(np.abs(f64[name] - want)) <= 1e-10 * max(np.max(np.abs(want)), 1e-300), name
    # after the flip, a float32 ulp amplified by A_LM^P: 1.5e-6 relative in the logits when it was seen
    logits = res.values["logits"]
    assert np.max(np.abs(f64["logits"] - logits)) <= 1e-4 * np.max(np.abs(logits))


def float32_rounding_flips(f64: dict, exact: dict, num_layers: int) -> list[tuple[int, str]]:
    """(layer, stage) for each of q and k whose float32 rounding differs between the float64 path and the exact
    values (the float32 RoPE arithmetic rounds them first)."""
    return [(layer, stage) for layer in range(num_layers) for stage in ("q", "k")
            if not np.array_equal(f64[f"layers.{layer}.{stage}"].astype(np.float32),
                                  exact[f"layers.{layer}.{stage}"].astype(np.float32))]


def test_negative_control_a_float32_flip_is_detected() -> None:
    exact = {f"layers.0.{s}": np.array([1.0, 2.0]) for s in ("q", "k")}
    f64 = {k: v.copy() for k, v in exact.items()}
    assert float32_rounding_flips(f64, exact, 1) == []
    f64["layers.0.k"][1] = np.nextafter(np.float32(2.0), np.float32(3.0)).astype(np.float64)
    assert float32_rounding_flips(f64, exact, 1) == [(0, "k")]
