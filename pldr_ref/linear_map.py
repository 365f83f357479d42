"""The affine map y = x W^T + b (torch ``nn.Linear`` layout): the Q/K/V and output projections, the LM head and the
dense layers of the SwiGLU units (FFN, metric learner) (spec §2.3-§2.5)."""

from __future__ import annotations

import numpy as np


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
