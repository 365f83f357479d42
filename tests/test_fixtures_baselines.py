"""Low-precision baselines: the stage-rounded run is the reference when no rounding happens, and
its error grows as the precision drops."""

from __future__ import annotations

import numpy as np

from pldr_ref import PLDRConfig, forward
from pldr_ref.fixtures.baselines import compute_baselines, error_metrics, rounded_forward
from pldr_ref.fixtures.weights import fixture_params


def _setup(**overrides):
    cfg = PLDRConfig.preset("tiny", **overrides)
    ids = np.array([[5, 9, 17, 3, 22], [7, 1, 2, 0, 0]])
    return fixture_params(cfg, 4), ids


def test_float64_rounding_reproduces_forward_bitwise():
    """With float64 'rounding' the baseline path must be the reference itself (catches drift from layer.py)."""
    for overrides in ({}, {"gram_mode": "cumulative"}, {"mask_mode": "additive", "rope_layout": "half"},
                      {"metric_learner": "v900", "A_dff_depth": 6},
                      {"g_mode": "random", "metric_learner": "none", "num_reslayerA": 0}):
        params, ids = _setup(**overrides)
        ref = forward(params, ids).flat()
        run = rounded_forward(params, ids, np.float64)
        assert set(run) == set(ref), overrides
        for k in ref:
            assert np.array_equal(run[k], ref[k]), (overrides, k)


def test_error_grows_as_precision_drops():
    params, ids = _setup()
    golden = forward(params, ids).flat()
    b = compute_baselines("forward", params, {}, {"token_ids": ids}, golden)
    f32, bf16 = b["float32"]["logits"]["rms_rel"], b["bfloat16"]["logits"]["rms_rel"]
    assert 0 < f32 < 1e-4 < bf16 < 1.0


def test_error_metrics():
    m = error_metrics(np.array([1.0, 2.5, -np.inf]), np.array([1.0, 2.0, -np.inf]))
    assert m == {"max_abs": 0.5, "max_rel": 0.25, "rms_rel": 0.224}  # 0.5 / sqrt(1 + 4) to 3 digits
    bad = error_metrics(np.array([np.inf, 1.0]), np.array([1.0, 1.0]))
    assert bad["nonfinite"] == 1 and bad["max_abs"] is None

