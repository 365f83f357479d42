"""Affine maps and the SwiGLU gated linear unit (spec §2.3)."""

from __future__ import annotations

import numpy as np

from pldr_ref.activations import silu
from pldr_ref.params import GLUParams


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y = x W^T + b on the last axis; ``weight`` is torch layout [out, in].

    Shapes: x [..., in] -> y [..., out].  Leading axes are flattened so that one GEMM
    [N, in] x [in, out] serves every row (e.g. all B*H*d_k rows of the metric learner).
    """
    x = np.asarray(x)
    if x.ndim > 2:
        y = np.matmul(x.reshape(-1, x.shape[-1]), weight.T).reshape(*x.shape[:-1], weight.shape[0])
    else:
        y = np.matmul(x, weight.T)
    if bias is not None:
        y += bias  # in place on the fresh product: same rounding as y + b, one large temporary fewer
    return y


def glu(x: np.ndarray, p: GLUParams) -> np.ndarray:
    """SwiGLU: GLU(z) = W3 (silu(W1 z + b1) * (W2 z + b2)) + b3 on the last axis.

    Shapes: [..., n] -> [..., k] with W1, W2 [m, n] and W3 [k, m].  Used by the FFN
    (n = k = d, m = dff) and by every metric-learner unit (n = k = d_k, m = A_dff).
    """
    gate = silu(linear(x, p.w1, p.b1))
    gate *= linear(x, p.w2, p.b2)  # in place on the fresh silu output: same product, one temporary fewer
    return linear(gate, p.w3, p.b3)
