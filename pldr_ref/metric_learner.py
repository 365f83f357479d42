"""Residual metric learner: A0 -> A (spec §2.4 steps 5-6, §2.6; paper eq. 3.3, Proposition 3.11).

All operations act on the last axis, so each row of A0 is processed independently
(row-wise equivariance, Proposition 3.11).  The same functions accept a global
A0 [B, H, d_k, d_k] or a cumulative one [B, H, S, d_k, d_k].  Every LayerNorm reads its options from the
config through :func:`pldr_ref.norms.configured_layer_norm`.  Every function computes in the arithmetic ``ops``
(:class:`pldr_ref.ops.Ops`, default the float64 reference :data:`pldr_ref.ops.FLOAT64_OPS`).
"""

from __future__ import annotations

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.norms import configured_layer_norm
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import LayerParams, ResUnitParams


def residual_unit(a: np.ndarray, unit: ResUnitParams, config: PLDRConfig, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """One unit: A <- LN_r(GLU_{r,D}(... GLU_{r,1}(A) ...) + A); no residual between the D GLUs."""
    h = a
    for g in unit.glus:  # D is a depth, not a data axis: the loop is over layers of the network
        h = ops.glu(h, g)
    return configured_layer_norm(h + a, unit.norm, config, ops)


def metric_learner_v500(a0: np.ndarray, lp: LayerParams, config: PLDRConfig, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """v500 / PT-v510 / HF: A = Res_R(... Res_1(LN_A0(A0)) ...), shapes [..., d_k, d_k]."""
    a = configured_layer_norm(a0, lp.a_norm, config, ops)
    for unit in lp.res_units:
        a = residual_unit(a, unit, config, ops)
    return a


def metric_learner_v900(a0: np.ndarray, lp: LayerParams, config: PLDRConfig, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """TF-v900: A = LN2(Dense_{Dd->dk}(Res_R(... LN1(Dense_{dk->Dd}(A0)) ...))) (spec §2.6)."""
    a = configured_layer_norm(ops.linear(a0, *lp.lift), lp.lift_norm, config, ops)
    for unit in lp.res_units:
        a = residual_unit(a, unit, config, ops)
    return configured_layer_norm(ops.linear(a, *lp.drop), lp.drop_norm, config, ops)


def metric_learner(a0: np.ndarray, lp: LayerParams, kind: str, config: PLDRConfig, ops: Ops = FLOAT64_OPS
                   ) -> np.ndarray:
    """Dispatch on ``kind`` in {"v500", "v900"}; A has the shape of A0.  ``config``: the LayerNorm options
    (:func:`pldr_ref.norms.configured_layer_norm`)."""
    if kind == "v500":
        return metric_learner_v500(a0, lp, config, ops)
    if kind == "v900":
        return metric_learner_v900(a0, lp, config, ops)
    raise ValueError(f"metric_learner kind {kind!r} computes no A (expected 'v500' or 'v900')")
