"""Default-run witness of the arb certification at the real width, and of the float64 tier's BLAS independence.

The full v510-110m certification (5 layers, S 16, minutes) runs under ``-m slow``
(``tests/test_exact_arb_accuracy.py``).  This witness keeps every width of v510-110m - d = 896, 14 heads of
d_k = 64, the metric learner's A_dff = 170, FFN 2389, its float32 quirks and additive mask - and cuts only
depth and vocabulary (1 layer, one residual unit of 2 GLUs instead of 8, 256 tokens, S = 4), so that every
value of every stage at these widths is certified in a few seconds of the default run.

The float64 tier is the code that calls BLAS (NumPy's matmul); it is run in subprocesses with 1 and 2 BLAS
threads and must stay within the documented bound of the certified values under both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from flint import arb

import pldr_ref
from pldr_ref.exact.accuracy import case_inputs
from pldr_ref.exact.arb import forward_certified, initial_precision
from pldr_ref.exact.arb.balls import round_balls, working_precision
from pldr_ref.exact.arb.model import REQUIRED_BITS

REPO = Path(__file__).resolve().parents[1]

#: v510-110m with its widths kept and its depth and vocabulary cut (see the module docstring).
WITNESS_FIELDS = {"num_layers": 1, "num_reslayerA": 1, "vocab_size": 256}
SEQ_LEN = 4
#: Normwise bound on the float64 logits against the certified ones at this size (docs/accuracy.md states the
#: float64 tier keeps about 8 digits at the real width, the float32 q/k rounding being the limit).
LOGITS_NORMWISE_BOUND = 1e-7


def witness_case() -> tuple[pldr_ref.Params, np.ndarray]:
    """The case of ``pldr-ref accuracy --preset v510-110m --set num_layers=1 --set num_reslayerA=1
    --set vocab_size=256 --seq-len 4 --engine arb`` (docs/accuracy.md): seed 0, batch 1."""
    return case_inputs(pldr_ref.PLDRConfig.preset("v510-110m", **WITNESS_FIELDS), 0, SEQ_LEN, batch=1)


@pytest.fixture(scope="module")
def witness():
    params, ids = witness_case()
    return params, ids, forward_certified(params, ids)


def normwise(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_real_width_forward_is_certified_in_one_attempt(witness) -> None:
    params, ids, res = witness
    c = params.config
    assert (c.d_model, c.num_heads, c.d_k, c.A_dff, c.dff) == (896, 14, 64, 170, 2389)
    assert c.rope_arithmetic_dtype == "float32" and c.mask_mode == "additive"
    assert res.all_certified, res.uncertified()
    assert [a.prec for a in res.attempts] == [initial_precision(c)]
    assert min(res.accuracy.values()) >= REQUIRED_BITS
    n_certified, n_values = res.counts()
    assert n_certified == n_values > 300_000
    assert list(res.values) == list(pldr_ref.forward(params, ids).flat())


def test_negative_control_a_wider_ball_is_not_certified(witness) -> None:
    """The certificate is a real check: balls widened by 2^-40 relative no longer decide most logits."""
    _, _, res = witness
    logits = res.balls["logits"]
    with working_precision(res.prec):  # a ball's ends are read at the working precision
        _, ok_original = round_balls(logits)
        widened = np.vectorize(lambda b: b + b * arb(0, 2.0 ** -40), otypes=[object])(logits)
        _, ok = round_balls(widened)
    assert ok_original.all()
    assert ok.mean() < 0.1


SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    from test_exact_arb_real_width import witness_case
    import pldr_ref
    params, ids = witness_case()
    np.save(sys.argv[1], pldr_ref.forward(params, ids).flat()["logits"], allow_pickle=False)
    """
)


def float64_logits_with_blas_threads(threads: tuple[int, ...], tmp_path: Path) -> list[np.ndarray]:
    """The float64 tier's logits, one subprocess per BLAS thread count (run side by side)."""
    procs = []
    for n in threads:
        env = dict(os.environ)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(n)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        out = tmp_path / f"logits_{n}.npy"
        script = SCRIPT.format(tests=str(REPO / "tests"))
        procs.append((out, subprocess.Popen([sys.executable, "-c", script, str(out)], env=env,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    results = []
    for out, proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(np.load(out, allow_pickle=False))
    return results


def test_float64_tier_within_the_bound_of_the_certified_values_at_1_and_2_blas_threads(witness, tmp_path) -> None:
    _, _, res = witness
    exact = res.values["logits"]
    for logits in float64_logits_with_blas_threads((1, 2), tmp_path):
        assert logits.shape == exact.shape
        assert normwise(logits, exact) <= LOGITS_NORMWISE_BOUND
    # negative control: the bound sees a 1e-6 relative change of the logits
    bad = exact + 1e-6 * np.max(np.abs(exact))
    assert normwise(bad, exact) > LOGITS_NORMWISE_BOUND
