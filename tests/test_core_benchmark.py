"""benchmarks/: bench_forward's product list matches the analytic FLOP count; both scripts run end to end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pldr_ref import PLDRConfig
from pldr_ref.config import PRESETS

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench(name: str = "bench_forward"):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_products_are_the_counted_flops(preset: str) -> None:
    bench = _bench()
    for g_mode in ("learned", "identity"):
        fields = {} if g_mode == "learned" else {"g_mode": g_mode, "metric_learner": "none"}
        c = PLDRConfig.preset(preset, **fields)
        for batch, seq in ((1, 1), (2, 7)):
            want = sum(bench.forward_flops(c, batch, seq).values())
            assert bench.product_flops(bench.product_shapes(c, batch, seq)) == pytest.approx(want, rel=1e-12)


def test_negative_control_a_missing_product_is_noticed() -> None:
    bench = _bench()
    c = PLDRConfig.preset("tiny")
    shapes = bench.product_shapes(c, 1, 8)[:-1]  # no LM head
    assert bench.product_flops(shapes) < sum(bench.forward_flops(c, 1, 8).values())


def test_benchmark_runs_on_a_tiny_model(capsys) -> None:
    assert _bench().main(["--preset", "tiny", "--seq", "8", "--cycles", "1", "--repeats", "1", "--no-torch"]) == 0
    out = capsys.readouterr().out
    assert "matrix products alone" in out and "keep_trace=False" in out


def test_softmax_benchmark_runs_and_checks_bits(capsys) -> None:
    assert _bench("bench_softmax").main(["--heads", "2", "--seq", "40", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "bit-identical: True" in out and "bit-identical: False" not in out


def test_time_limits_benchmark_reports_and_flags(capsys, monkeypatch) -> None:
    """bench_time_limits prints each item against its target and exits 1 when one is over it or fails
    (stand-in items: the real ones are the timed runs moved out of the default tests)."""
    bench = _bench("bench_time_limits")
    assert set(bench.ITEMS) == {"golden_verify", "diagnose_model_tiny", "exact_forward_tiny", "diagnose_model_v510"}
    monkeypatch.setattr(bench, "ITEMS", {"quick": (lambda: True, 60.0, True), "slow": (lambda: True, -1.0, False),
                                         "broken": (lambda: False, 60.0, False)})
    assert bench.main([]) == 0
    assert "quick" in capsys.readouterr().out
    assert bench.main(["--only", "slow"]) == 1 and "OVER" in capsys.readouterr().out
    assert bench.main(["--only", "broken"]) == 1 and "FAILED" in capsys.readouterr().out
