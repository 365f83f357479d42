"""Exact blockwise cross-entropy and DAG terms vs independent float64 / SciPy computations."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import scipy.linalg
from scipy.special import logsumexp

import pldr_ref
from pldr_ref.exact import blockwise_loss, to_mp
from pldr_ref.exact.accuracy import case_inputs
from pldr_ref.exact.loss import dag_term, notears_h


def ce_float64(logits: np.ndarray, targets: np.ndarray, ignore: int) -> float:
    m = targets != ignore
    safe = np.where(m, targets, 0)
    ce = logsumexp(logits, axis=-1) - np.take_along_axis(logits, safe[..., None], -1)[..., 0]
    return float((ce * m).sum() / m.sum())


def test_native_and_hf_blockwise_ce_match_float64() -> None:
    c = pldr_ref.PLDRConfig.preset("tiny")
    params, ids = case_inputs(c, 0, 9)  # row 1 has pad targets at the end
    out = blockwise_loss(params, ids)
    logits = pldr_ref.forward(params, ids[:, :-1]).logits
    assert out["ce"] == pytest.approx(ce_float64(logits, ids[:, 1:], 0), rel=1e-13)
    labels = ids.copy()
    labels[1, -3:] = -100
    hf = blockwise_loss(params, ids, variant="hf", labels=labels)
    logits_hf = pldr_ref.forward(params, ids, pad_masking=False).logits
    assert hf["ce"] == pytest.approx(ce_float64(logits_hf[:, :-1], labels[:, 1:], -100), rel=1e-13)
    # negative control: ignoring nothing (pad targets counted) changes the native loss
    assert out["ce"] != pytest.approx(ce_float64(logits, ids[:, 1:], -1), rel=1e-6)
    with pytest.raises(ValueError, match="every target is ignored"):
        blockwise_loss(params, np.array([[3, 0]]))
    with pytest.raises(ValueError, match="variant"):
        blockwise_loss(params, ids, variant="tf")


def test_dag_terms_match_scipy_expm() -> None:
    c = pldr_ref.PLDRConfig.preset("tiny", num_layers=1)
    params, ids = case_inputs(c, 1, 5)
    out = blockwise_loss(params, ids, dag_coeffs=(1e-3, 5e-3, 5e-3))
    trace = pldr_ref.forward(params, ids[:, :-1]).layers[0]
    for name, arr in (("A_LM", trace.A_LM), ("A_P", trace.A_P), ("G_LM", trace.G_LM)):
        blocks = arr.reshape(-1, 8, 8)
        ref = np.mean([abs(np.log(np.trace(scipy.linalg.expm(x * x)) / 8)) for x in blocks])
        assert out[f"dag_{name}"] == pytest.approx(ref, rel=1e-9)
    total = out["ce"] + 1e-3 * out["dag_A_LM"] + 5e-3 * (out["dag_A_P"] + out["dag_G_LM"])
    assert out["total"] == pytest.approx(total, rel=1e-14)


def test_notears_h_zero_exactly_for_dag_and_positive_otherwise() -> None:
    upper = np.triu(np.arange(1.0, 17.0).reshape(4, 4), 1)
    with mpmath.workdps(40):
        assert notears_h(to_mp(upper)) == 0
        # negative control: one back edge makes a cycle, h > 0
        cyc = upper.copy()
        cyc[3, 0] = 0.5
        assert notears_h(to_mp(cyc)) > 0
        # entrywise >= eps > 0: h >= d eps^2 (Remark 4.5)
        eps = 1e-3
        assert notears_h(to_mp(np.full((4, 4), eps))) >= 4 * eps**2
        assert dag_term([to_mp(upper)]) == 0
