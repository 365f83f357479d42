"""Model section ``contraction``: the row map of the residual metric learner (paper eq. 3.3, Prop. 3.11).

The metric learner acts on each row r of its input independently: phi = Res_R o ... o Res_1 with
Res(x) = LN(GLU_D(... GLU_1(x)) + x).  Measured on rows r of the layer's actual input (v500: LN_A0(A0) rows;
v900: the lifted, normalised rows), drawn from every prompt:

* sigma_max (and sigma_min) of the composite Jacobian J_phi(r) = J_R ... J_1 (each unit at its own point
  of the trajectory);
* sigma_max of each unit's Jacobian J_j along that trajectory (a decomposition diagnostic);
* empirical pairwise ratios ||phi(r) - phi(r')|| / ||r - r'|| for pairs from one prompt and from two.

Jacobians are exact (analytic forward-mode derivatives of GLU and LayerNorm, below), not finite differences;
a sampled sigma_max < 1 at visited rows is evidence, not a certificate, of contraction.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from pldr_ref.config import PLDRConfig
from pldr_ref.diagnostics.run import ModelRun, stack
from pldr_ref.diagnostics.spectra import summary
from pldr_ref.linear_map import linear
from pldr_ref.norms import configured_layer_norm, layer_norm
from pldr_ref.params import GLUParams, LayerParams, NormParams, ResUnitParams


def glu_jvp(x: np.ndarray, t: np.ndarray, p: GLUParams) -> tuple[np.ndarray, np.ndarray]:
    """(GLU(x), dGLU(x)[t]) for rows x [N, n] and tangents t [N, k, n] (k directions per row, as rows).

    GLU(x) = W3 (silu(z1) * z2) + b3 with z1 = W1 x + b1, z2 = W2 x + b2, silu'(z) = s(z) (1 + z (1 - s(z))):
    d GLU = W3 (silu'(z1) z2 * W1 t + silu(z1) * W2 t).  Tangents are rows so that each weight is applied to
    all N k directions in one GEMM (``pldr_ref.linear_map.linear`` without bias).
    """
    z1 = linear(x, p.w1, p.b1)
    z2 = linear(x, p.w2, p.b2)
    sig = expit(z1)
    act = z1 * sig
    dact = sig * (1.0 + z1 * (1.0 - sig))
    th = (dact * z2)[:, None, :] * linear(t, p.w1) + act[:, None, :] * linear(t, p.w2)
    return linear(act * z2, p.w3, p.b3), linear(th, p.w3)


def layer_norm_jvp(x: np.ndarray, t: np.ndarray, norm: NormParams, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(LN(x), dLN(x)[t]) for rows x [N, n], tangents t [N, k, n].

    With xc = x - mean(x), s = (var + eps)^(-1/2) and tc = t - mean(t):
    dLN = gamma * s * (tc - xc s^2 (xc . tc) / n).
    """
    n = x.shape[-1]
    xc = x - x.mean(axis=-1, keepdims=True)
    s = 1.0 / np.sqrt(np.mean(xc * xc, axis=-1) + eps)  # [N]
    tc = t - t.mean(axis=-1, keepdims=True)
    proj = np.einsum("nj,nkj->nk", xc, tc)  # xc . tc per direction
    dy = s[:, None, None] * (tc - proj[:, :, None] * (xc * (s * s / n)[:, None])[:, None, :])
    return layer_norm(x, norm.gamma, norm.beta, eps), dy * norm.gamma


def residual_unit_jacobian(x: np.ndarray, unit: ResUnitParams, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(Res(x) [N, n], J_Res(x) [N, n, n]) of one residual unit at rows x [N, n]; J[r, i, j] = d Res_i / d x_j."""
    t = np.broadcast_to(np.eye(x.shape[-1]), (x.shape[0], x.shape[-1], x.shape[-1]))
    h, th = x, t
    for g in unit.glus:  # depth of the unit (D GLUs), sequential
        h, th = glu_jvp(h, th, g)
    y, ty = layer_norm_jvp(h + x, th + t, unit.norm, eps)
    return y, np.swapaxes(ty, -1, -2)  # tangent rows t[r, j] = dy/dx_j -> Jacobian columns


def row_map(x: np.ndarray, lp: LayerParams, config: PLDRConfig) -> np.ndarray:
    """phi(x) = Res_R(... Res_1(x)) for rows x [..., n] (no Jacobian), the model's own residual units."""
    from pldr_ref.metric_learner import residual_unit

    for unit in lp.res_units:  # units are sequential
        x = residual_unit(x, unit, config)
    return x


def row_map_jacobians(x: np.ndarray, lp: LayerParams, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(composite Jacobian J_phi [N, n, n], per-unit Jacobians [R, N, n, n]) at rows x [N, n]."""
    units = []
    h = x
    for unit in lp.res_units:  # units are sequential
        h, j = residual_unit_jacobian(h, unit, eps)
        units.append(j)
    comp = np.broadcast_to(np.eye(x.shape[-1]), (x.shape[0], x.shape[-1], x.shape[-1]))
    for j in units:
        comp = np.matmul(j, comp)
    return comp, np.stack(units)


def learner_input_rows(run: ModelRun, layer: int) -> np.ndarray:
    """The rows the residual units read in ``layer``, [B, H * d_k, n] (grouped by prompt)."""
    c = run.config
    lp = run.params.layer(layer)
    a0 = run.out.layers[layer].A0
    if c.metric_learner == "v500":
        x = configured_layer_norm(a0, lp.a_norm, c)
    else:
        x = configured_layer_norm(linear(a0, *lp.lift), lp.lift_norm, c)
    return x.reshape(x.shape[0], -1, x.shape[-1])


def contraction_section(run: ModelRun) -> dict:
    """Composite and per-unit Jacobian spectra and pairwise ratios per layer (see module doc)."""
    c = run.config
    if c.metric_learner == "none" or stack(run, "A0") is None or not run.params.layer(0).res_units:
        return {"applicable": False, "reason": "no residual metric learner in this configuration"}
    o = run.options
    rng = np.random.Generator(np.random.PCG64(o.seed))
    comp_max, comp_min, unit_max, within, cross = [], [], [], [], []
    for i in range(c.num_layers):  # layers have different weights
        lp = run.params.layer(i)
        rows = learner_input_rows(run, i)  # [B, R, n]
        b, r, n = rows.shape
        pick = np.argsort(rng.random((b, r)), axis=1)
        jac_rows = np.take_along_axis(rows, pick[:, : min(o.jacobian_rows, r), None], axis=1).reshape(-1, n)
        comp, units = row_map_jacobians(jac_rows, lp, c.eps_ln)
        sc = np.linalg.svd(comp, compute_uv=False)
        comp_max.append(sc[:, 0])
        comp_min.append(sc[:, -1])
        unit_max.append(np.linalg.svd(units, compute_uv=False)[..., 0])
        pool = np.take_along_axis(rows, pick[:, : min(o.pool_rows, r), None], axis=1)  # [B, P, n]
        out = row_map(pool, lp, c)
        p = pool.shape[1]
        pb, i1, i2 = rng.integers(0, b, o.pairs), rng.integers(0, p, o.pairs), rng.integers(0, p, o.pairs)
        within.append(_ratios(pool[pb, i1], pool[pb, i2], out[pb, i1], out[pb, i2]))
        if b > 1:
            pa = rng.integers(0, b, o.pairs)
            pc = (pa + rng.integers(1, b, o.pairs)) % b  # a different prompt
            cross.append(_ratios(pool[pa, i1], pool[pc, i2], out[pa, i1], out[pc, i2]))
    cm = np.stack(comp_max)
    return {
        "applicable": True,
        "rows_per_layer": int(cm.shape[1]),
        "composite_sigma_max": summary(cm),
        "composite_sigma_max_by_layer": [summary(x) for x in cm],
        "composite_sigma_min": summary(np.stack(comp_min)),
        "per_unit_sigma_max": summary(np.stack(unit_max)),
        "pairwise_within_prompt": summary(np.concatenate(within)),
        "pairwise_cross_prompt": summary(np.concatenate(cross)) if cross else None,
        "n_pairs": {"within": int(sum(x.size for x in within)), "cross": int(sum(x.size for x in cross))},
        "jacobian": "analytic forward-mode (GLU and LayerNorm derivatives), composite = product of unit Jacobians",
        "label": "sampled pointwise statistics on visited rows, not a uniform contraction certificate",
    }


def _ratios(r1: np.ndarray, r2: np.ndarray, y1: np.ndarray, y2: np.ndarray) -> np.ndarray:
    """||y1 - y2|| / ||r1 - r2|| per pair, dropping pairs with ||r1 - r2|| <= 1e-12 (coincident rows)."""
    den = np.linalg.norm(r1 - r2, axis=-1)
    keep = den > 1e-12
    return np.linalg.norm(y1 - y2, axis=-1)[keep] / den[keep]
