"""DAG regulariser of PLDR-LLM training (spec §9; paper §4.3, Remark 4.5; Lean ``DagLoss``).

For M in R^{d x d} and N = M o M (entrywise square, so N >= 0):

* NOTEARS h(M) = tr(expm(N)) - d = sum_{k >= 1} tr(N^k) / k!  (>= 0; = 0 iff the graph of M is acyclic);
* the implemented loss D(M) = |log(tr(expm(N)) / d)| = log1p(h(M) / d);
* the training loss = CE + sum_X c_X mean_{l,b,h} D(X) over X in (A_LM, A_P, G_LM), with the
  TF-v500 coefficients (1e-3, 5e-3, 5e-3) or a PT-v510_dag coefficient list.

Numerics.  h is computed as tr(F) with F = expm(N) - I by scaling and squaring on the
nonnegative matrix N: the Taylor series of expm(N / 2^s) - I (every term >= 0), then s doublings
F <- F F + 2 F (exact identity expm(2X) - I = (expm(X) - I)^2 + 2 (expm(X) - I)).  Every operation
adds and multiplies nonnegative numbers, so there is no cancellation: h >= 0 always, h keeps full
relative accuracy down to tiny entries (h >= d eps^2 for |M_ii| >= eps is resolved, where
tr(expm(N)) - d would round to 0), and an acyclic pattern gives exactly 0 (diag(F) stays an exact
zero).  Where h exceeds the float64 range it is returned as +inf (it truly does there) and
log tr(expm(N)) comes from the eigenvalues lambda_i of N as the log-sum-exp m + log sum_i
exp(lambda_i - m), m = max Re lambda_i, so D never overflows (entries of order 1e3 give N of order 1e6).
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

#: ||N 2^-s||_inf target of the scaling step before the Taylor series is summed.
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


def _expm_minus_identity(n: np.ndarray) -> np.ndarray:
    """F = expm(N) - I for N >= 0 [..., d, d] by nonnegative scaling and squaring (no cancellation).

    N is scaled by 2^-s so that ||N 2^-s||_inf <= TAYLOR_RADIUS, the series sum_{k>=1} X^k / k! is summed
    until the new term is negligible, then F <- F F + 2 F is applied s times.  Overflow gives +inf.
    """
    norm = np.max(np.sum(n, axis=-1), axis=-1)  # [...] per-block ||N||_inf
    with np.errstate(divide="ignore"):
        steps = np.where(norm <= TAYLOR_RADIUS, 0, np.ceil(np.log2(np.maximum(norm, 1e-300) / TAYLOR_RADIUS)))
    steps = steps.astype(np.int64)  # per block, so a block's result does not depend on its batch-mates
    x = np.ldexp(n, -steps[..., None, None])
    term = x
    f = x.copy()
    tol = np.finfo(np.float64).eps * 2.0**-10
    for k in range(2, MAX_TAYLOR_TERMS + 1):
        term = np.matmul(term, x) / k
        f = f + term
        # per-block stop (zero further terms), so a block's result does not depend on its batch-mates
        done = np.all(term <= tol * f, axis=(-2, -1))
        if np.all(done):
            break
        term = np.where(done[..., None, None], 0.0, term)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(int(steps.max(initial=0))):
            f = np.where((i < steps)[..., None, None], np.matmul(f, f) + 2.0 * f, f)
    return np.where(np.isnan(f), np.inf, f)


def _h_nonneg(n: np.ndarray) -> np.ndarray:
    """sum_{k>=1} tr(N^k)/k! = tr(expm(N) - I) for N >= 0, per block; +inf beyond float64."""
    return np.trace(_expm_minus_identity(n), axis1=-2, axis2=-1)


def notears_h(m: np.ndarray) -> np.ndarray:
    """h(M) = tr(expm(M o M)) - d per block, [..., d, d] -> [...] (NOTEARS; paper §4.3).

    Always >= 0, exactly 0 for an acyclic pattern, +inf where h exceeds float64 (module docstring).
    """
    return _h_nonneg(hadamard_square(_check_square(m)))


def log_trace_expm(m: np.ndarray) -> np.ndarray:
    """log tr(expm(M o M)) per block without overflow: log(d) + log1p(h/d) where h is finite, else the
    eigenvalue log-sum-exp m + log sum_i exp(lambda_i - m)."""
    a = _check_square(m)
    d = a.shape[-1]
    n = hadamard_square(a)
    h = _h_nonneg(n)
    finite = np.isfinite(h)
    out = np.empty(a.shape[:-2])
    out[finite] = math.log(d) + np.log1p(h[finite] / d)
    if not np.all(finite):
        lam = np.linalg.eigvals(n[~finite])
        top = np.max(lam.real, axis=-1)
        out[~finite] = top + np.log(np.sum(np.exp(lam - top[..., None]), axis=-1).real)
    return out


def dag_loss(m: np.ndarray) -> np.ndarray:
    """The implemented per-block loss D(M) = |log(tr(expm(M o M)) / d)| = log1p(h(M)/d), [..., d, d] -> [...].

    Computed as log1p(h/d) (accurate for tiny h) where h is finite; otherwise as
    |log tr(expm(M o M)) - log d| from the eigenvalue log-sum-exp (finite for entries ~1e3).
    """
    a = _check_square(m)
    d = a.shape[-1]
    h = _h_nonneg(hadamard_square(a))
    finite = np.isfinite(h)
    out = np.empty(a.shape[:-2])
    out[finite] = np.log1p(h[finite] / d)
    if not np.all(finite):
        out[~finite] = np.abs(log_trace_expm(a[~finite]) - math.log(d))
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
