"""LayerNorm over the last axis (spec §1; paper Lemma 5.11; Lean ``LayerNorm``)."""

from __future__ import annotations

import numpy as np

from pldr_ref.constants import EPS_LN


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = EPS_LN) -> np.ndarray:
    """LN(x) = (x - mu) / sqrt(var + eps) * gamma + beta over the last axis.

    mu and var (biased, 1/n) are taken over the last axis; ``gamma``, ``beta`` have its size.
    Shapes: x [..., n] -> [..., n].  The torch evaluation order is used.
    """
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = np.mean(xc * xc, axis=-1, keepdims=True)
    return xc / np.sqrt(var + eps) * gamma + beta
