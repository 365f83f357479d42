"""Exact-tier full forward: agreement with the float64 tier within the bound of docs/accuracy.md,
trace contract, the dps / 2*dps guard, and bit-identical results across runs and BLAS thread counts."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pldr_ref
from pldr_ref.exact import PrecisionError, forward
from pldr_ref.exact.accuracy import CONFIGS, case_inputs, named_config

REPO = Path(__file__).resolve().parents[1]
#: Bound stated in docs/accuracy.md for the preset "tiny": max|logits_f64 - logits_exact| / max|logits_exact|.
TINY_LOGITS_NORMWISE_BOUND = 1e-12


def tiny_case(seed: int = 0):
    c = pldr_ref.PLDRConfig.preset("tiny")
    return case_inputs(c, seed, 8)


def digest(trace: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(trace):
        h.update(name.encode())
        h.update(np.ascontiguousarray(trace[name], dtype=np.float64).tobytes())
    return h.hexdigest()


def test_tiny_forward_guarded_within_documented_bound() -> None:
    """Correctness only; the run's time (target 60 s) is reported by ``benchmarks/bench_time_limits.py``."""
    params, ids = tiny_case()
    exact = forward(params, ids)  # guard on: dps 50 and 100
    f64 = pldr_ref.forward(params, ids).flat()
    err = np.max(np.abs(f64["logits"] - exact["logits"])) / np.max(np.abs(exact["logits"]))
    assert err <= TINY_LOGITS_NORMWISE_BOUND
    # negative control: the bound sees a 1e-10 change in a single output bias
    bias = np.array(params["final_layer.bias"])
    bias[0] += 1e-10
    f64_bad = pldr_ref.forward(params.replace(**{"final_layer.bias": bias}), ids).flat()["logits"]
    assert np.max(np.abs(f64_bad - exact["logits"])) / np.max(np.abs(exact["logits"])) > TINY_LOGITS_NORMWISE_BOUND


def test_docs_state_the_bound_checked_here() -> None:
    text = (REPO / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert "1e-12" in text and "pldr-ref accuracy" in text


@pytest.mark.parametrize("name", list(CONFIGS))
def test_trace_names_and_shapes_match_float64_tier(name: str) -> None:
    config = named_config(name)
    params, ids = case_inputs(config, 5, 4)
    exact = forward(params, ids, guard=False)
    f64 = pldr_ref.forward(params, ids).flat()
    assert list(exact) == list(f64)
    for key, arr in f64.items():
        assert exact[key].shape == arr.shape, key
        assert exact[key].dtype == np.float64
        scale = max(np.max(np.abs(exact[key])), 1e-300)
        tol = 1e-5 if config.rope_precision == "float32" else 1e-9  # float32 RN32 is discontinuous
        assert np.max(np.abs(exact[key] - arr)) <= tol * scale, key


def test_start_pos_and_attention_mask_follow_float64_tier() -> None:
    params, ids = tiny_case(1)
    am = np.ones_like(ids)
    am[0, -2:] = 0
    exact = forward(params, ids[:, :4], start_pos=40, attention_mask=am[:, :4], guard=False)
    f64 = pldr_ref.forward(params, ids[:, :4], start_pos=40, attention_mask=am[:, :4]).flat()
    np.testing.assert_allclose(exact["logits"], f64["logits"], rtol=0, atol=1e-12 * np.max(np.abs(f64["logits"])))
    with pytest.raises(ValueError, match="max_seq_len"):
        forward(params, ids, start_pos=60)
    with pytest.raises(TypeError, match="Params"):
        forward({"a": 1}, ids)  # type: ignore[arg-type]


def cancellation_params(seed: int = 0):
    """d = 12 (sqrt(12) irrational): embedding rows M (1 + k 2^-52), so LN's x - mu cancels ~52 bits."""
    c = pldr_ref.PLDRConfig.preset("tiny", d_k=6, num_layers=1)
    p = pldr_ref.init_params(c, seed)
    emb = np.array(p["decoder.embedding.weight"])
    spread = 1.0 + np.arange(12) * 2.0**-52
    emb[:8] = (1.0 + np.arange(8))[:, None] * 1e3 * spread[None, :]
    return p.replace(**{"decoder.embedding.weight": emb})


def test_guard_raises_at_low_dps_and_passes_at_high_dps() -> None:
    params = cancellation_params()
    ids = np.array([[1, 2, 3, 4, 5, 6, 7]])
    with pytest.raises(PrecisionError) as info:
        forward(params, ids, dps=20)
    assert info.value.stage == "x0" and info.value.dps == 20
    assert "x0" in str(info.value) and "dps=40" in str(info.value)
    out = forward(params, ids, dps=50)
    # the result agrees with a much higher precision run: the guard's acceptance was right
    ref = forward(params, ids, dps=120, guard=False)
    assert digest(out) == digest(ref)
    # negative control: without the guard dps=20 silently returns a different (wrong) x0
    low = forward(params, ids, dps=20, guard=False)
    assert not np.array_equal(low["x0"], ref["x0"])


def test_guard_on_single_op() -> None:
    from pldr_ref.exact import exact_op

    x = 1e8 + np.array([0, 1, 2, 3, 5, 8, 13]) * np.spacing(1e8)  # mean 1e8 + 32/7 ulp is not dyadic
    g, b = np.ones(7), np.zeros(7)
    with pytest.raises(PrecisionError, match="layer_norm"):
        exact_op("layer_norm", x, g, b, 1e-6, dps=18)
    exact_op("layer_norm", x, g, b, 1e-6, dps=50)
    # negative control: a well-conditioned row passes already at dps 18
    exact_op("layer_norm", np.array([0.5, -1.25, 2.0, 3.0]), np.ones(4), np.zeros(4), 1e-6, dps=18)
    with pytest.raises(ValueError, match="dps"):
        exact_op("sigmoid", np.zeros(1), dps=0)


def test_overflowing_stage_raises_naming_it() -> None:
    c = pldr_ref.PLDRConfig.preset("tiny", num_layers=1)
    p = pldr_ref.init_params(c, 0)
    pw = np.full(p["decoder.dec_layers.0.mha1.plgatt_layer.pwlst"].shape, -40.0)
    w = np.zeros_like(pw)
    b = np.full_like(pw, -100.0)  # iSwiGLU(-100) ~ 4e-40, so A_LM ~ 1e-9 and A_LM^-40 ~ 1e360
    p = p.replace(**{"decoder.dec_layers.0.mha1.plgatt_layer.pwlst": pw,
                     "decoder.dec_layers.0.mha1.plgatt_layer.Wlst": w,
                     "decoder.dec_layers.0.mha1.plgatt_layer.blst": b})
    with pytest.raises(FloatingPointError, match="A_P"):
        forward(p, np.array([[1, 2]]), guard=False)


def test_bit_identical_across_runs() -> None:
    params, ids = tiny_case(2)
    a = forward(params, ids, guard=False)
    b = forward(params, ids, guard=False)
    assert digest(a) == digest(b)
    # negative control: a one-ulp change of one weight changes the digest
    w = np.array(params["decoder.dec_layers.0.mha1.wq.weight"])
    w[0, 0] = np.nextafter(w[0, 0], np.inf)
    c = forward(params.replace(**{"decoder.dec_layers.0.mha1.wq.weight": w}), ids, guard=False)
    assert digest(c) != digest(a)


SCRIPT = textwrap.dedent(
    """
    import hashlib, numpy as np, pldr_ref
    from pldr_ref.exact import forward
    from pldr_ref.exact.accuracy import case_inputs
    params, ids = case_inputs(pldr_ref.PLDRConfig.preset("tiny"), 2, 8)
    out = forward(params, ids, guard=False)
    h = hashlib.sha256()
    for name in sorted(out):
        h.update(name.encode()); h.update(np.ascontiguousarray(out[name], dtype=np.float64).tobytes())
    print(h.hexdigest())
    """
)


def run_with_threads(n: int) -> str:
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(n)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120,
                         check=True)
    return res.stdout.strip()


def test_independent_of_blas_thread_count() -> None:
    one, two = run_with_threads(1), run_with_threads(2)
    assert len(one) == 64 and one == two
    params, ids = tiny_case(2)
    assert digest(forward(params, ids, guard=False)) == one
    # negative control: the digest distinguishes inputs (another seed gives another digest)
    p3, ids3 = tiny_case(3)
    assert digest(forward(p3, ids3, guard=False)) != one


@pytest.mark.parametrize(("seq", "heads", "d_k"), [(1, 1, 2), (2, 1, 2), (1, 2, 4)])
def test_edge_shapes_full_forward(seq: int, heads: int, d_k: int) -> None:
    c = pldr_ref.PLDRConfig.preset("tiny", num_heads=heads, d_k=d_k, num_layers=1, dff=6, A_dff=3)
    params, ids = case_inputs(c, 9, max(seq, 2))
    ids = ids[:, :seq]
    exact = forward(params, ids)
    f64 = pldr_ref.forward(params, ids).flat()
    assert list(exact) == list(f64)
    for key, arr in f64.items():
        assert exact[key].shape == arr.shape
        np.testing.assert_allclose(exact[key], arr, rtol=0, atol=1e-10 * max(np.max(np.abs(arr)), 1e-300))
