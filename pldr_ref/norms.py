"""LayerNorm over the last axis (spec §1; paper Lemma 5.11; Lean ``LayerNorm``).

:func:`layer_norm` is the equation with explicit arguments (the op fixtures call it).  Every LayerNorm of the
model -- the input norm, LN1, LN2 and the metric learner's -- calls :func:`configured_layer_norm`, the one place
that maps a :class:`~pldr_ref.config.PLDRConfig` to LayerNorm's options, so a LayerNorm switch is read here and
nowhere else (``docs/adding_a_switch.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.constants import EPS_LN
from pldr_ref.params import NormParams

if TYPE_CHECKING:
    from pldr_ref.ops import Ops


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


def configured_layer_norm(x: np.ndarray, norm: NormParams, config: PLDRConfig, ops: Ops | None = None) -> np.ndarray:
    """LN(x) with gamma, beta = ``norm`` and every LayerNorm option ``config`` sets (eps = ``config.eps_ln``).

    Shapes: x [..., n] -> [..., n].  It calls ``ops.layer_norm`` (:class:`pldr_ref.ops.Ops`; None: this module's
    :func:`layer_norm`), which an emulated arithmetic (:class:`pldr_ref.harness.policy.arithmetic.EmulatedOps`) provides
    for itself; an option that pins LayerNorm's arithmetic (a released code's own precision) is a function of its
    own chosen here, which an emulation leaves as it is.
    """
    return (layer_norm if ops is None else ops.layer_norm)(x, norm.gamma, norm.beta, config.eps_ln)
