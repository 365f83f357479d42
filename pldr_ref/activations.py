"""Pointwise activations: sigmoid, SiLU, iSwiGLU (spec §1, §2.4 step 7; paper Definition 3.1)."""

from __future__ import annotations

import numpy as np
from scipy.special import expit


def sigmoid(z: np.ndarray) -> np.ndarray:
    """sigma(z) = 1 / (1 + exp(-z)), evaluated without overflow (scipy ``expit``)."""
    return expit(np.asarray(z, dtype=np.float64))


def silu(z: np.ndarray) -> np.ndarray:
    """silu(z) = z * sigma(z)."""
    z = np.asarray(z, dtype=np.float64)
    s = np.asarray(expit(z))  # expit returns a scalar for 0-d input; out= needs an array
    np.multiply(z, s, out=s)  # z * sigma(z), computed into the fresh sigma buffer
    return s


def iswiglu(z: np.ndarray) -> np.ndarray:
    """iSwiGLU(z) = z * silu(z) = z^2 sigma(z) >= 0, elementwise (paper Definition 3.1; Lean ``Iswiglu``).

    SwiGLU with identity weights and no bias.  For z -> -inf it underflows to +0.0,
    never to a negative value, so A_LM = iSwiGLU(.) + eps_adj stays >= eps_adj.
    """
    z = np.asarray(z, dtype=np.float64)
    return z * (z * expit(z))
