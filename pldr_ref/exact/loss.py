"""Exact-tier blockwise cross-entropy and DAG regulariser (spec §9; paper §4.5).

* Blockwise CE (native): logits of ``seq[:, :-1]`` against targets ``seq[:, 1:]``;
  CE_{b,t} = logsumexp(z_{b,t}) - z_{b,t}[y_{b,t}], token mean over targets != pad_id.
* Blockwise CE (HF): logits of ``ids`` against ``labels`` shifted inside (logits[:, :-1] vs
  labels[:, 1:]), ignoring -100.
* DAG: D(X) = mean_{l,b,h} | ln( tr(expm(X o X)) / d_k ) | for X in {A_LM, A_P, G_LM};
  training loss = CE + c_LM D(A_LM) + c_P D(A_P) + c_G D(G_LM) (TF coefficients 1e-3, 5e-3, 5e-3).

Everything is evaluated at ``dps`` and, with ``guard``, re-checked at ``2 * dps``; results are
correctly rounded float64.
"""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np
from mpmath import mpf

from pldr_ref.constants import HF_IGNORE_INDEX
from pldr_ref.exact.guard import guarded
from pldr_ref.exact.model import ExactModel, forward_mp, key_padding_of
from pldr_ref.exact.numbers import round_mpf
from pldr_ref.exact.ops import Matrix, Vector
from pldr_ref.inputs import validate_token_ids
from pldr_ref.params import Params

#: DAG coefficients of TF ``hvd_pldr_llm_v500_dagreg`` for (A_LM, A_P, G_LM) (spec §9).
TF_DAG_COEFFS = (1e-3, 5e-3, 5e-3)
DAG_TENSORS = ("A_LM", "A_P", "G_LM")


def token_cross_entropy(logits: Vector, target: int) -> mpf:
    """CE = ln sum_j e^{z_j} - z_target for one row of logits."""
    m = max(logits)
    return m + mpmath.log(mpmath.fsum(mpmath.exp(z - m) for z in logits)) - logits[target]


def mean_cross_entropy(logits: list[list[Vector]], targets: np.ndarray, ignore: int) -> mpf:
    """sum_{b,t} m_{b,t} CE_{b,t} / sum m, m = [target != ignore]; ValueError if nothing counts."""
    terms = [token_cross_entropy(logits[b][t], int(y)) for (b, t), y in np.ndenumerate(targets) if y != ignore]
    if not terms:
        raise ValueError("every target is ignored: the blockwise loss is undefined (0/0)")
    return mpmath.fsum(terms) / len(terms)


def notears_h(x: Matrix) -> mpf:
    """h(X) = tr(expm(X o X)) - d (NOTEARS), with mpmath's matrix exponential."""
    sq = mpmath.matrix([[v * v for v in row] for row in x])
    e = mpmath.expm(sq)
    return mpmath.fsum(e[i, i] for i in range(len(x))) - len(x)


def dag_term(blocks: list[Matrix]) -> mpf:
    """D = mean over blocks of |ln(tr(expm(X o X)) / d)| = mean log1p(h / d)."""
    vals = [abs(mpmath.log1p(notears_h(x) / len(x))) for x in blocks]
    return mpmath.fsum(vals) / len(vals)


def _blocks_of(trace: dict[str, Any], num_layers: int, name: str) -> list[Matrix]:
    """Every d_k x d_k block of ``layers.{l}.{name}`` (over layers, batch, heads, and rows if cumulative)."""
    out: list[Matrix] = []

    def walk(node: Any) -> None:
        if node and isinstance(node[0], list) and node[0] and isinstance(node[0][0], list):
            for child in node:
                walk(child)
        else:
            out.append(node)

    for layer in range(num_layers):
        key = f"layers.{layer}.{name}"
        if key not in trace:
            raise ValueError(f"the model has no {name} (fixed G / no metric learner): DAG term undefined")
        walk(trace[key])
    return out


def _inputs(config: Any, token_ids: Any, variant: str, labels: Any) -> tuple[np.ndarray, np.ndarray, int]:
    ids = np.asarray(token_ids)
    if variant == "native":
        if ids.ndim != 2 or ids.shape[1] < 2:
            raise ValueError(f"native blockwise loss needs a sequence [B, S+1] with S >= 1, got shape {ids.shape}")
        return validate_token_ids(ids[:, :-1], config), ids[:, 1:].astype(np.int64), config.pad_id
    if variant == "hf":
        lab = ids if labels is None else np.asarray(labels)
        if lab.shape != ids.shape:
            raise ValueError(f"labels shape {lab.shape} differs from input shape {ids.shape}")
        return validate_token_ids(ids, config), lab[:, 1:].astype(np.int64), HF_IGNORE_INDEX
    raise ValueError(f"variant must be 'native' or 'hf', got {variant!r}")


def blockwise_loss(params: Params, token_ids: Any, *, variant: str = "native", labels: Any = None,
                   dag_coeffs: tuple[float, float, float] | None = None, dps: int = 50,
                   guard: bool = True) -> dict[str, float]:
    """Exact blockwise training loss, correctly rounded: ``{"ce", ("dag_A_LM", "dag_A_P", "dag_G_LM", "total")}``.

    ``variant="native"``: ``token_ids`` is the packed sequence [B, S+1] (inputs ``[:, :-1]``,
    targets ``[:, 1:]``, pad targets ignored).  ``variant="hf"``: ``token_ids`` [B, S] and
    ``labels`` (default: the ids) shifted inside, -100 ignored.  With ``dag_coeffs`` the DAG
    terms and ``total = ce + sum c_i D_i`` are added.
    """
    model = ExactModel(params)
    ids, targets, ignore = _inputs(model.config, token_ids, variant, labels)
    key_padding = key_padding_of(ids, model.config, None, variant == "native")

    def compute(d: int) -> dict[str, np.ndarray]:
        trace = forward_mp(model, ids, dps=d, key_padding=key_padding)
        with mpmath.workdps(d):
            logits = trace["logits"] if variant == "native" else [row[:-1] for row in trace["logits"]]
            ce = mean_cross_entropy(logits, targets, ignore)
            out = {"ce": ce}
            if dag_coeffs is not None:
                total = ce
                for name, coeff in zip(DAG_TENSORS, dag_coeffs, strict=True):
                    term = dag_term(_blocks_of(trace, model.config.num_layers, name))
                    out[f"dag_{name}"] = term
                    total = total + mpmath.mpf(coeff) * term
                out["total"] = total
        return {k: np.array(round_mpf(v)) for k, v in out.items()}

    result = guarded(compute, dps) if guard else compute(dps)
    return {k: float(v) for k, v in result.items()}
