"""Order parameter m(theta): relative RMS fluctuation of a deductive tensor between two inputs
(paper Definition 5.1, Proposition 5.2(ii); spec §10).

For tensors T1 = T(x1), T2 = T(x2) of one type at one layer,

    m = RMS(T1 - T2) / RMS_ref,   with the piecewise convention m = 0 when T1 == T2 (0/0 = 0),

RMS(X) = sqrt(mean(X^2)) over every entry (batch, heads, d_k x d_k).  ``RMS_ref`` is
``(RMS(T1) + RMS(T2)) / 2`` (``normalization="symmetric"``, the companion audit's convention, the
default) or ``RMS(T1)`` (``"first"``, normalising by the first run as the earlier PLDR-LLM papers do).
A zero reference with a non-zero numerator gives +inf (unreachable with ``"symmetric"``: a zero mean
RMS forces both tensors, hence the numerator, to zero).  By construction m = 0 exactly iff the tensor is
bitwise equal on the two inputs (the definitional equivalence of Proposition 5.2(ii)).
"""

from __future__ import annotations

import numpy as np

from pldr_ref.model import ForwardOutput

#: Deductive tensor types of a layer in forward order (A = metric-learner output).
DEDUCTIVE_TENSORS = ("A", "A_LM", "A_P", "G_LM")

NORMALIZATIONS = ("symmetric", "first")


def rms(x: np.ndarray) -> float:
    """sqrt(mean(x^2)) over every entry, scaled by max|x| so that squares neither underflow nor overflow
    (a non-zero tensor always has a non-zero RMS, which the piecewise convention relies on)."""
    a = np.asarray(x, dtype=np.float64)
    s = float(np.max(np.abs(a))) if a.size else 0.0
    if s == 0.0:
        return 0.0
    b = a / s
    return s * float(np.sqrt(np.mean(b * b)))


def relative_rms_fluctuation(t1: np.ndarray, t2: np.ndarray, normalization: str = "symmetric") -> float:
    """m(T1, T2) = RMS(T1 - T2) / RMS_ref with 0/0 = 0 (see the module docstring)."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    a = np.asarray(t1, dtype=np.float64)
    b = np.asarray(t2, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"tensors to compare have different shapes {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("order parameter of non-finite tensors is undefined")
    with np.errstate(over="ignore"):
        diff = a - b
    if not np.all(np.isfinite(diff)):
        raise ValueError("tensor difference overflows float64")
    num = rms(diff)
    if num == 0.0:
        return 0.0
    if normalization == "symmetric":
        # num / ((ra + rb) / 2) written so that halving cannot underflow a subnormal reference to 0
        return 2.0 * float(num / (rms(a) + rms(b)))
    ref = rms(a)
    return float(num / ref) if ref > 0.0 else float("inf")


def order_parameter(
    out1: ForwardOutput,
    out2: ForwardOutput,
    tensors: tuple[str, ...] = DEDUCTIVE_TENSORS,
    normalization: str = "symmetric",
) -> dict[str, np.ndarray]:
    """m per tensor type and layer between two forward traces: {name: [L]}.

    Tensor types a configuration does not compute (A_LM, A_P with a fixed G, A without a metric
    learner) are left out.  The two traces must come from the same configuration.
    """
    if out1.config != out2.config:
        raise ValueError("order parameter needs two traces of the same configuration")
    unknown = set(tensors) - set(DEDUCTIVE_TENSORS)
    if unknown:
        raise ValueError(f"unknown deductive tensor(s) {sorted(unknown)}; choose from {DEDUCTIVE_TENSORS}")
    result = {}
    for name in tensors:
        pairs = [(getattr(a, name), getattr(b, name)) for a, b in zip(out1.layers, out2.layers, strict=True)]
        if any(x is None or y is None for x, y in pairs):
            continue
        result[name] = np.array([relative_rms_fluctuation(x, y, normalization) for x, y in pairs])
    return result
