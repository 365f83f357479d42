"""Model section ``dag``: DAG-loss values D(X) = log1p(h(X)/d_k) of A_LM, A_P, G_LM per layer, prompt and head
(paper §4.3, Remark 4.5; ``pldr_ref.dag.dag_loss``).  A_LM >= eps_adj entrywise gives h >= d_k eps_adj^2, so
D(A_LM) >= log1p(eps_adj^2) > 0 in exact arithmetic (about 1e-18, resolved by the nonnegative expm series)."""

from __future__ import annotations

import numpy as np

from pldr_ref.dag import DAG_TENSORS, dag_loss
from pldr_ref.diagnostics.run import ModelRun, stack
from pldr_ref.diagnostics.spectra import summary


def dag_section(run: ModelRun) -> dict:
    """Per tensor: summary over every block, per-layer median, and the number of exact zeros."""
    rep: dict = {}
    for name in DAG_TENSORS:
        t = stack(run, name)
        if t is None:
            rep[name] = None
            continue
        d = dag_loss(t)  # [L, B, H]
        rep[name] = {"summary": summary(d), "median_by_layer": np.median(d.reshape(d.shape[0], -1), axis=1).tolist(),
                     "n_exact_zero": int(np.sum(d == 0.0))}
    return rep
