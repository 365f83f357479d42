"""DAG regulariser of PLDR-LLM training (spec §9; paper §4.3, Remark 4.5; Lean ``DagLoss``).

For M in R^{d x d} and N = M o M (entrywise square, so N >= 0):

* NOTEARS h(M) = tr(expm(N)) - d = sum_{k >= 1} tr(N^k) / k!  (>= 0; = 0 iff the graph of M is acyclic);
* the implemented loss D(M) = |log(tr(expm(N)) / d)| = log1p(h(M) / d);
* the training loss = CE + sum_X c_X mean_{l,b,h} D(X) over X in (A_LM, A_P, G_LM), with the
  TF-v500 coefficients (1e-3, 5e-3, 5e-3) or a PT-v510_dag coefficient list.

Numerics.  For ||N||_inf <= :data:`TAYLOR_RADIUS` the series is summed directly: every term is
>= 0, so there is no cancellation, h keeps full relative accuracy down to tiny entries (h >= d eps^2
for |M_ii| >= eps is resolved, where tr(expm(N)) - d would round to 0), and an acyclic pattern gives
exactly 0 (the diagonals of N^k are exact zeros).  Otherwise the eigenvalues lambda_i of N are used:
tr(expm(N)) = sum_i exp(lambda_i), and log tr(expm(N)) = m + log sum_i exp(lambda_i - m) with
m = max Re lambda_i, so D never overflows (entries of order 1e3 give N of order 1e6).  h itself is
returned as +inf when it exceeds the float64 range (it truly does there).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from pldr_ref.constants import PAD_ID
from pldr_ref.model import ForwardOutput, forward
from pldr_ref.params import Params

#: TF-v500 (``hvd_pldr_llm_v500_dagreg``) coefficients for (A_LM, A_P, G_LM).
TF_DAG_COEFFS: tuple[float, float, float] = (1e-3, 5e-3, 5e-3)

#: PT-v510_dag sample-script coefficients for (A_LM, A_P, G_LM) (the CLI default is all zeros).
PT_SAMPLE_DAG_COEFFS: tuple[float, float, float] = (0.05, 0.05, 0.05)

#: Tensors the DAG loss regularises, in coefficient order.
DAG_TENSORS = ("A_LM", "A_P", "G_LM")

#: Largest ||M o M||_inf for which the Taylor series of h is summed directly.
TAYLOR_RADIUS = 1.0

#: Cap on Taylor terms: at ||N||_inf <= 1 the k-th term is <= d / k!, below 1e-30 d for k = 28.
MAX_TAYLOR_TERMS = 40

CONVENTIONS = ("tf", "pt")


def hadamard_square(m: np.ndarray) -> np.ndarray:
    """N = M o M, the weighted adjacency whose walks h counts (entrywise >= 0)."""
    return m * m


def _check_square(m: np.ndarray) -> np.ndarray:
    a = np.asarray(m, dtype=np.float64)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.shape[-1] == 0:
        raise ValueError(f"DAG functions need square matrices [..., d, d], got shape {np.shape(m)}")
    if not np.all(np.isfinite(a)):
        raise ValueError("DAG functions need finite matrices (got NaN or inf)")
    return a


def _taylor_h(n: np.ndarray) -> np.ndarray:
    """sum_{k>=1} tr(N^k)/k! for N >= 0 with ||N||_inf <= TAYLOR_RADIUS; terms added until negligible."""
    term = n
    h = np.trace(n, axis1=-2, axis2=-1).copy()
    for k in range(2, MAX_TAYLOR_TERMS + 1):
        term = np.matmul(term, n) / k
        t = np.trace(term, axis1=-2, axis2=-1)
        h = h + t
        if np.all(t <= np.finfo(np.float64).eps * 2.0**-10 * h):
            break
    return h


def _small(n: np.ndarray) -> np.ndarray:
    """Mask [...] of blocks in the Taylor regime."""
    return np.max(np.sum(np.abs(n), axis=-1), axis=-1) <= TAYLOR_RADIUS


def notears_h(m: np.ndarray) -> np.ndarray:
    """h(M) = tr(expm(M o M)) - d per block, [..., d, d] -> [...] (NOTEARS; paper §4.3).

    Exactly 0 for an acyclic pattern in the Taylor regime and, for triangular patterns, in the
    eigenvalue regime (LAPACK returns the diagonal exactly); +inf where h exceeds float64.
    """
    a = _check_square(m)
    n = hadamard_square(a)
    small = _small(n)
    out = np.empty(a.shape[:-2])
    if np.any(small):
        out[small] = _taylor_h(n[small])
    if not np.all(small):
        # h = d (exp(log tr - log d) - 1): exact 0 when the eigenvalues are 0, +inf beyond float64
        with np.errstate(over="ignore"):
            out[~small] = a.shape[-1] * np.expm1(log_trace_expm(a[~small]) - math.log(a.shape[-1]))
    return out


def log_trace_expm(m: np.ndarray) -> np.ndarray:
    """log tr(expm(M o M)) per block without overflow: log(d + h) in the Taylor regime, else the
    eigenvalue log-sum-exp m + log sum_i exp(lambda_i - m)."""
    a = _check_square(m)
    d = a.shape[-1]
    n = hadamard_square(a)
    small = _small(n)
    out = np.empty(a.shape[:-2])
    if np.any(small):
        out[small] = math.log(d) + np.log1p(_taylor_h(n[small]) / d)
    if not np.all(small):
        lam = np.linalg.eigvals(n[~small])
        top = np.max(lam.real, axis=-1)
        out[~small] = top + np.log(np.sum(np.exp(lam - top[..., None]), axis=-1).real)
    return out


def dag_loss(m: np.ndarray) -> np.ndarray:
    """The implemented per-block loss D(M) = |log(tr(expm(M o M)) / d)| = log1p(h(M)/d), [..., d, d] -> [...].

    In the Taylor regime it is computed as log1p(h/d) (accurate for tiny h); otherwise as
    |log tr(expm(M o M)) - log d| from the eigenvalue log-sum-exp (finite for entries ~1e3).
    """
    a = _check_square(m)
    d = a.shape[-1]
    n = hadamard_square(a)
    small = _small(n)
    out = np.empty(a.shape[:-2])
    if np.any(small):
        out[small] = np.log1p(_taylor_h(n[small]) / d)
    if not np.all(small):
        out[~small] = np.abs(log_trace_expm(a[~small]) - math.log(d))
    return out


def dag_term(x: np.ndarray) -> float:
    """D(X) = mean over every leading index (layers, batch, heads, [rows]) of the per-block loss (spec §9)."""
    return float(np.mean(dag_loss(x)))


def stacked_tensor(output: ForwardOutput, name: str) -> np.ndarray:
    """A deductive tensor stacked over layers, [L, B, H, (S,) d_k, d_k]; ``ValueError`` if a layer lacks it."""
    arrs = [getattr(t, name) for t in output.layers]
    if any(a is None for a in arrs):
        raise ValueError(f"{name} is not computed by this configuration (g_mode={output.config.g_mode!r})")
    return np.stack(arrs)


@dataclasses.dataclass(frozen=True)
class TrainingLoss:
    """cross_entropy (native masked token mean), dag[name] = D(X), coefficients[name], and the total."""

    cross_entropy: float
    dag: dict[str, float]
    coefficients: dict[str, float]
    total: float


def dag_terms(output: ForwardOutput, *, a_p_float32: bool = False) -> dict[str, float]:
    """D(A_LM), D(A_P), D(G_LM) of a forward trace; ``a_p_float32`` rounds A_P to float32 first (PT-v510_dag)."""
    terms = {}
    for name in DAG_TENSORS:
        x = stacked_tensor(output, name)
        if name == "A_P" and a_p_float32:
            with np.errstate(over="ignore"):
                x = x.astype(np.float32).astype(np.float64)
            if not np.all(np.isfinite(x)):
                raise FloatingPointError("A_P overflows float32 (PT-v510_dag casts it before the DAG loss)")
        terms[name] = dag_term(x)
    return terms


def training_loss(
    params: Params,
    token_ids: np.ndarray,
    *,
    convention: str = "tf",
    coefficients: tuple[float, float, float] | None = None,
    pad_id: int = PAD_ID,
) -> TrainingLoss:
    """CE + weighted DAG terms on tar_inp = seq[:, :-1], tar_real = seq[:, 1:] (spec §9).

    ``convention="tf"``: coefficients default to :data:`TF_DAG_COEFFS`, A_P = A_LM^P in float64.
    ``convention="pt"``: coefficients must be given (e.g. :data:`PT_SAMPLE_DAG_COEFFS`); only terms with
    c > 0 are added and A_P is rounded to float32; all-zero coefficients raise ``ValueError`` (the
    PT-v510_dag loss fails there with UnboundLocalError, spec §13.2).
    """
    from pldr_ref.inference.scoring import masked_cross_entropy  # scoring imports generation; keep dag light

    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    if coefficients is None:
        if convention == "pt":
            raise ValueError("convention='pt' needs explicit coefficients (the sample script's: PT_SAMPLE_DAG_COEFFS)")
        coefficients = TF_DAG_COEFFS
    coeffs = dict(zip(DAG_TENSORS, (float(c) for c in coefficients), strict=True))
    if any(not math.isfinite(c) or c < 0 for c in coeffs.values()):
        raise ValueError(f"DAG coefficients must be finite and >= 0, got {coefficients}")
    if convention == "pt" and not any(c > 0 for c in coeffs.values()):
        raise ValueError("convention='pt' with all DAG coefficients 0: PT-v510_dag raises UnboundLocalError here")
    ids = np.asarray(token_ids)
    if ids.ndim != 2 or ids.shape[1] < 2:
        raise ValueError(f"token_ids must be [B, T] with T >= 2, got shape {ids.shape}")
    out = forward(params, ids[:, :-1])
    ce = masked_cross_entropy(out.logits, ids[:, 1:], pad_id).mean
    terms = dag_terms(out, a_p_float32=convention == "pt")
    used = {k: c for k, c in coeffs.items() if convention == "tf" or c > 0}
    total = ce + sum(c * terms[k] for k, c in used.items())
    return TrainingLoss(ce, terms, used, float(total))
