"""Model section ``layernorm``: the eps-LayerNorm scale error on the density-operator rows (paper Lemma 5.11).

The metric learner's first LayerNorm (v500 / PT-v510 / HF: ``A0`` norm) reads the rows r of the un-normalised
Gram A0 = sum_s q~_s q~_s^T.  LayerNorm is scale invariant up to its eps: LN(r) = LN(r / S) exactly when
eps = 0.  The scale error is measured directly with the model's own gamma, beta and eps:

    direct_abs = ||LN(r) - LN(r / S)||_2,   direct_rel = direct_abs / ||LN(r / S)||_2  (0 when equal),

with S the number of query rows, next to the first-order proxy eps / (2 v(r / S)) (v the biased row variance;
+inf on a constant row, whose count is reported).
"""

from __future__ import annotations

import numpy as np

from pldr_ref.diagnostics.run import ModelRun, stack
from pldr_ref.diagnostics.spectra import summary
from pldr_ref.norms import layer_norm


def scale_error(rows: np.ndarray, s: int, gamma: np.ndarray, beta: np.ndarray, eps: float) -> dict[str, np.ndarray]:
    """direct_abs, direct_rel, proxy and variance of r / S for every row of ``rows`` [..., n] (see module doc)."""
    r = np.asarray(rows, dtype=np.float64)
    a = layer_norm(r, gamma, beta, eps)
    b = layer_norm(r / s, gamma, beta, eps)
    diff = np.linalg.norm(a - b, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    var = np.var(r / s, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(diff == 0.0, 0.0, diff / nb)
        proxy = np.where(var > 0.0, eps / (2.0 * var), np.inf)
    return {"direct_abs": diff, "direct_rel": rel, "proxy": proxy, "variance": var}


def layernorm_section(run: ModelRun) -> dict:
    """Direct scale error and proxy over every A0 row of every layer, prompt and head (v500 learner only)."""
    c = run.config
    if c.metric_learner != "v500":
        return {"applicable": False, "reason": f"metric_learner={c.metric_learner!r} has no LayerNorm on A0 rows"}
    a0 = stack(run, "A0")  # [L, B, H, d_k, d_k]
    s = run.ids.shape[1]
    gam = np.stack([run.params.layer(i).a_norm.gamma for i in range(c.num_layers)])[:, None, None, None, :]
    bet = np.stack([run.params.layer(i).a_norm.beta for i in range(c.num_layers)])[:, None, None, None, :]
    e = scale_error(a0, s, gam, bet, c.eps_ln)
    return {
        "applicable": True,
        "rows_per_layer": int(np.prod(a0.shape[1:-1])),
        "seq_len": int(s),
        "eps": c.eps_ln,
        "direct_abs": summary(e["direct_abs"]),
        "direct_rel": summary(e["direct_rel"]),
        "direct_rel_max_by_layer": np.max(e["direct_rel"], axis=(1, 2, 3)).tolist(),
        "proxy": summary(e["proxy"][np.isfinite(e["proxy"])]),
        "row_variance_of_A0_over_S": summary(e["variance"]),
        "n_zero_variance_rows": int(np.sum(e["variance"] == 0.0)),
        "label": "direct = computed LN(r) - LN(r/S); proxy = eps/(2 v(r/S)), first order, reported as a proxy",
    }
