"""Acceptance item 6: batch permutation equivariance of the whole forward map, and row-permutation
equivariance of the residual metric learner (paper Proposition 3.11).

BLAS may round a row differently depending on where it sits in a GEMM, so equality is checked to
1e-13 relative (normwise) rather than bit for bit, or, for a stage whose inputs are ill-conditioned, to
100 x its measured change under a one-ulp perturbation of every parameter (e.g. the metric learner's
LayerNorm of a density-operator row with a tiny spread amplifies round-off by max|x| / std(x), which
reaches ~4000 on some S = 1 draws of the thorough profile).
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import config_from_shape, model_params, rel_diff, shapes, token_ids
from hypothesis import given
from hypothesis import strategies as st

from pldr_ref import Params, forward
from pldr_ref.metric_learner import metric_learner
from pldr_ref.norms import layer_norm

EQUIV_RTOL = 1e-13
#: Factor between a stage's change under one-ulp parameter perturbations and its equivariance tolerance.
ULP_SAFETY = 100.0


def ulp_perturbed(params: Params, seed: int) -> Params:
    """Every parameter times (1 +- 2^-52), signs from ``seed``: a rounding-sized change of the model."""
    rng = np.random.default_rng(seed)
    return Params(params.config, {k: v * (1.0 + rng.choice([-1.0, 1.0], v.shape) * 2.0**-52)
                                  for k, v in params.items()})


def assert_batch_equivariant(run, ids: np.ndarray, perm: np.ndarray, run_perturbed=None) -> None:
    """run(ids[perm]) == run(ids)[perm] for every returned array (a dict name -> [B, ...]).

    Tolerance per array: EQUIV_RTOL, or ULP_SAFETY x its normwise change under ``run_perturbed`` (the same
    model with one-ulp parameter perturbations) when that is larger (an ill-conditioned stage).
    """
    base, permuted = run(ids), run(ids[perm])
    noise = run_perturbed(ids) if run_perturbed is not None else {}
    for name, arr in base.items():
        tol = max(EQUIV_RTOL, ULP_SAFETY * rel_diff(noise[name], arr)) if name in noise else EQUIV_RTOL
        assert rel_diff(permuted[name], arr[perm]) <= tol, (name, tol)


def _trace(params):
    def run(ids: np.ndarray) -> dict[str, np.ndarray]:
        flat = forward(params, ids).flat()
        return {k: v for k, v in flat.items() if v.ndim and v.shape[0] == ids.shape[0]}

    return run


@given(shape=shapes(), seed=st.integers(0, 2**16), pad=st.booleans())
def test_batch_permutation_permutes_outputs(shape: dict, seed: int, pad: bool) -> None:
    cfg = config_from_shape(shape)
    params = model_params(cfg, seed)
    batch = 3
    ids = token_ids(cfg, batch, shape["seq"], seed, low=0 if pad else 1)
    perm = np.random.default_rng(seed).permutation(batch)
    assert_batch_equivariant(_trace(params), ids, perm, _trace(ulp_perturbed(params, seed + 1)))


def test_negative_control_batch_mixing_is_caught() -> None:
    cfg = config_from_shape({"num_heads": 2, "d_k": 4, "num_layers": 1})
    params = model_params(cfg, 0)
    ids = token_ids(cfg, 3, 4, 0)

    def mixing(x: np.ndarray) -> dict[str, np.ndarray]:  # a backend that leaks state across the batch
        return {"logits": np.cumsum(forward(params, x).logits, axis=0)}

    with pytest.raises(AssertionError):
        assert_batch_equivariant(mixing, ids, np.array([2, 0, 1]))


# ------------------------------------------------------------------ Proposition 3.11
LEARNERS = {"v500": {}, "v900": {"metric_learner": "v900", "A_dff_depth": 7}}


@pytest.mark.parametrize("kind", sorted(LEARNERS))
@given(shape=shapes(max_dk=8), seed=st.integers(0, 2**16))
def test_metric_learner_is_row_equivariant(kind: str, shape: dict, seed: int) -> None:
    """ML(A0[..., pi, :]) == ML(A0)[..., pi, :]: every operation acts on the last axis only."""
    cfg = config_from_shape(shape, **LEARNERS[kind])
    lp = model_params(cfg, seed).layer(0)
    rng = np.random.default_rng(seed)
    a0 = rng.standard_normal((2, cfg.num_heads, cfg.d_k, cfg.d_k))
    perm = rng.permutation(cfg.d_k)
    out = metric_learner(a0, lp, kind, cfg)
    assert rel_diff(metric_learner(a0[..., perm, :], lp, kind, cfg), out[..., perm, :]) <= EQUIV_RTOL


@pytest.mark.parametrize("kind", sorted(LEARNERS))
def test_negative_control_columns_are_mixed(kind: str) -> None:
    """The learner is not column-equivariant (its GLUs mix the last axis), so the check is not vacuous."""
    cfg = config_from_shape({"num_heads": 2, "d_k": 4, "num_layers": 1}, **LEARNERS[kind])
    lp = model_params(cfg, 0).layer(0)
    a0 = np.random.default_rng(0).standard_normal((1, 2, 4, 4))
    perm = np.array([1, 0, 3, 2])
    out = metric_learner(a0, lp, kind, cfg)
    assert rel_diff(metric_learner(a0[..., :, perm], lp, kind, cfg), out[..., :, perm]) > 1e-6


def test_negative_control_column_norm_breaks_row_equivariance() -> None:
    """A learner normalising over rows (axis -2) instead of the last axis is caught by the row check."""
    a0 = np.random.default_rng(1).standard_normal((1, 1, 4, 4)) * np.arange(1, 5)[None, None, :, None]
    gamma = np.linspace(0.5, 2.0, 4)

    def broken(a: np.ndarray) -> np.ndarray:
        return np.swapaxes(layer_norm(np.swapaxes(a, -1, -2), gamma, np.zeros(4)), -1, -2)

    perm = np.array([3, 1, 0, 2])
    assert rel_diff(broken(a0[..., perm, :]), broken(a0)[..., perm, :]) > 1e-6
