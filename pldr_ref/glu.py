"""The SwiGLU gated linear unit (spec §2.3), built from the affine map :func:`pldr_ref.linear_map.linear`."""

from __future__ import annotations

import numpy as np

from pldr_ref.activations import silu
from pldr_ref.linear_map import linear
from pldr_ref.params import GLUParams


def glu(x: np.ndarray, p: GLUParams) -> np.ndarray:
    """SwiGLU: GLU(z) = W3 (silu(W1 z + b1) * (W2 z + b2)) + b3 on the last axis.

    Shapes: [..., n] -> [..., k] with W1, W2 [m, n] and W3 [k, m].  Used by the FFN
    (n = k = d, m = dff) and by every metric-learner unit (n = k = d_k, m = A_dff).
    """
    gate = silu(linear(x, p.w1, p.b1))
    gate *= linear(x, p.w2, p.b2)  # in place on the fresh silu output: same product, one temporary fewer
    return linear(gate, p.w3, p.b3)
