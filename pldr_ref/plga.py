"""Power Law Graph Attention operator: A -> A_LM -> A_P -> G_LM (spec §2.4 step 7; paper eqs. 3.4-3.6).

Per head h, with W, b, P, a, b_a in R^{d_k x d_k}:

* A_LM = iSwiGLU(W A + b) + eps_adj        (eq. 3.4, "metric tensor"; W A is a matrix product)
* A_P  = A_LM^(elementwise P)              (eq. 3.5, "potential tensor")
* G_LM = a A_P + b_a                       (eq. 3.6, "energy-curvature tensor"; a A_P is a matrix product)
"""

from __future__ import annotations

import numpy as np

from pldr_ref.activations import iswiglu
from pldr_ref.constants import EPS_ADJ


def _per_head(t: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Reshape a per-head tensor [H, d, d] to broadcast against [B, H, (S,) d, d]."""
    return t.reshape(t.shape[0], *([1] * (like.ndim - 4)), *t.shape[-2:])


def metric_tensor(a: np.ndarray, W: np.ndarray, b: np.ndarray, eps_adj: float = EPS_ADJ) -> np.ndarray:
    """A_LM = iSwiGLU(W A + b) + eps_adj, entrywise >= eps_adj > 0 (paper eq. 3.4, Proposition 3.7).

    a: [B, H, d_k, d_k] (or [B, H, S, d_k, d_k] for the cumulative Gram); W, b: [H, d_k, d_k].
    Lean ``Iswiglu`` (nonnegativity), ``HadamardPower`` (positivity hypothesis).
    """
    return iswiglu(np.matmul(_per_head(W, a), a) + _per_head(b, a)) + eps_adj


def potential_tensor(a_lm: np.ndarray, P: np.ndarray) -> np.ndarray:
    """A_P = A_LM^(o P), the elementwise real power (paper eq. 3.5; Lean ``HadamardPower``).

    Requires A_LM > 0 (guaranteed by eps_adj).  P is learned and may be negative, so
    entries near eps_adj can overflow to inf; the model's finiteness check reports that.
    """
    return np.power(a_lm, _per_head(P, a_lm))


def energy_curvature(a_p: np.ndarray, a: np.ndarray, b_a: np.ndarray) -> np.ndarray:
    """G_LM = a A_P + b_a, a matrix product per head (paper eq. 3.6), shape of A_P."""
    return np.matmul(_per_head(a, a_p), a_p) + _per_head(b_a, a_p)
