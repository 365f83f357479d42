"""Operator mutation run (``pldr-ref prove --mutants``): inject realistic bugs into pldr_ref operators and record
which mirrors of the operator's own Lean file catch each one.

A mutant replaces one pldr_ref function for the duration of :func:`patched`: the module attribute and every
module-level name bound to the same function object (``from pldr_ref.x import f`` copies in pldr_ref and
proofs_check) are swapped, so callers inside pldr_ref see the bug too.  pldr_ref is not edited.

A mirror "catches" a mutant when its positive run does not pass with the mutant in place (the ci profile,
controls not run).  The target is that every mutant is caught by at least one mirror of its own Lean file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from scipy.special import expit

#: pldr_ref function -> Lean file stem whose mirrors must catch its mutants.
OPERATOR_LEAN_FILE = {
    "pldr_ref.norms.layer_norm": "LayerNorm",
    "pldr_ref.activations.iswiglu": "Iswiglu",
    "pldr_ref.activations.sigmoid": "Iswiglu",
    "pldr_ref.plga.metric_tensor": "Iswiglu",
    "pldr_ref.plga.potential_tensor": "HadamardPower",
    "pldr_ref.plga.energy_curvature": "InferenceCollapse",
    "pldr_ref.density.density_operator": "DensityOperator",
    "pldr_ref.attention.masked_softmax": "Softmax",
    "pldr_ref.attention.apply_mask": "Softmax",
    "pldr_ref.attention.attention_scores": "InferenceCollapse",
    "pldr_ref.rope.apply_rope": "Rope",
    "pldr_ref.rope.rope_frequencies": "Rope",
    "pldr_ref.metric_learner.metric_learner": "RankOne",
    "pldr_ref.dag.notears_h": "DagLoss",
    "pldr_ref.dag.dag_loss": "DagLoss",
    "pldr_ref.inference.cache.g_cache_from_output": "InferenceCollapse",
    "pldr_ref.inference.scoring.prefix_final_row_logits": "OnlineContract",
    "pldr_ref.activations.silu": "Contraction",
}


def _resolve(qualified: str) -> tuple[Any, str, Callable[..., Any]]:
    module_name, _, attr = qualified.rpartition(".")
    module = importlib.import_module(module_name)
    return module, attr, getattr(module, attr)


@contextlib.contextmanager
def patched(qualified: str, replacement: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """Replace the pldr_ref function ``qualified`` by ``replacement`` everywhere it is bound at module level
    (pldr_ref and proofs_check modules); yields the original; always restores."""
    from proofs_check import tracing

    _, _, original = _resolve(qualified)
    code = getattr(replacement, "__code__", None)
    if code is not None:
        tracing.ALIASES[code] = qualified  # the tracer sees the stand-in as the operator it replaces
    swapped: list[tuple[Any, str, Any]] = []
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name.startswith("pldr_ref") or name.startswith("proofs_check")):
            continue
        for attr, value in list(vars(mod).items()):
            if value is original:
                setattr(mod, attr, replacement)
                swapped.append((mod, attr, original))
    # the float64 arithmetic the forward map is handed (pldr_ref.ops.Ops) holds the primitives as static methods
    from pldr_ref.ops import Ops

    for attr, value in list(vars(Ops).items()):
        if isinstance(value, staticmethod) and value.__func__ is original:
            setattr(Ops, attr, staticmethod(replacement))
            swapped.append((Ops, attr, value))
    try:
        yield original
    finally:
        for owner, attr, value in swapped:
            setattr(owner, attr, value)
        if code is not None:
            tracing.ALIASES.pop(code, None)


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One injected bug: ``make(original)`` returns the buggy replacement of ``operator``."""

    name: str
    operator: str
    description: str
    make: Callable[[Callable[..., Any]], Callable[..., Any]]

    @property
    def lean_file(self) -> str:
        return OPERATOR_LEAN_FILE[self.operator]


# ---------------------------------------------------------------- the bugs


def _ln(variant: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def layer_norm(x, gamma, beta, eps=1e-6):
            x = np.asarray(x, dtype=np.float64)
            n = x.shape[-1]
            mu = x.mean(axis=-1, keepdims=True)
            xc = x - mu
            var = np.sum(xc * xc, axis=-1, keepdims=True) / (n - 1 if variant == "ddof1" and n > 1 else n)
            if variant == "eps_outside":
                return xc / (np.sqrt(var) + eps) * gamma + beta
            if variant == "no_eps":
                return xc / np.sqrt(var) * gamma + beta
            if variant == "no_beta":
                return xc / np.sqrt(var + eps) * gamma
            if variant == "uncentred":
                return x / np.sqrt(var + eps) * gamma + beta
            return xc / np.sqrt(var + eps) * gamma + beta

        return layer_norm

    return make


def _wrap(post: Callable[..., Any], pre: Callable[..., Any] | None = None):
    """Mutant factory: call the original on pre(args) and apply post(result, *args)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def mutant(*args: Any, **kwargs: Any) -> Any:
            call_args = pre(*args) if pre is not None else args
            return post(original(*call_args, **kwargs), *args)

        return mutant

    return make


def _replace(fn: Callable[..., Any]):
    return lambda original: fn


def _iswiglu_sigmoid_sign(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    return z * (z * expit(-z))


def _iswiglu_negated(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    return -(z * (z * expit(z)))


def _sigmoid_sign(z: np.ndarray) -> np.ndarray:
    return expit(-np.asarray(z, dtype=np.float64))


def _metric_no_eps(a, W, b, eps_adj=1e-9):
    from pldr_ref.activations import iswiglu
    from pldr_ref.plga import _per_head

    return iswiglu(np.matmul(_per_head(W, a), a) + _per_head(b, a))


def _metric_eps_inside(a, W, b, eps_adj=1e-9):
    from pldr_ref.activations import iswiglu
    from pldr_ref.plga import _per_head

    return iswiglu(np.matmul(_per_head(W, a), a) + _per_head(b, a) + eps_adj)


def _potential_p_transposed(a_lm, P):
    from pldr_ref.plga import _per_head

    return np.power(a_lm, _per_head(np.swapaxes(P, -1, -2), a_lm))


def _potential_abs_exponent(a_lm, P):
    from pldr_ref.plga import _per_head

    return np.power(a_lm, _per_head(np.abs(P), a_lm))


def _energy_no_b_a(a_p, a, b_a):
    from pldr_ref.plga import _per_head

    return np.matmul(_per_head(a, a_p), a_p)


def _energy_right_side(a_p, a, b_a):
    from pldr_ref.plga import _per_head

    return np.matmul(a_p, _per_head(a, a_p)) + _per_head(b_a, a_p)


def _potential_head0(a_lm, P):
    from pldr_ref.plga import _per_head

    first = np.broadcast_to(P[:1], P.shape)  # head 0's exponent for every head
    return np.power(a_lm, _per_head(first, a_lm))


def _silu_slope(z):
    z = np.asarray(z, dtype=np.float64)
    return z * expit(1.702 * z)  # the GELU approximation's slope in SiLU's place


def _make_mask_row_neg_inf(original: Callable[..., Any]) -> Callable[..., Any]:
    def apply_mask(scores, mask, mode, *args, **kwargs):
        logits = original(scores, mask, mode, *args, **kwargs)
        if mode != "finfo_min" or mask is None:
            return logits
        full = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(logits)).all(axis=-1, keepdims=True)
        return np.where(full, -np.inf, logits)  # a fully masked row as -inf (the ideal mask's convention)

    return apply_mask


def _density_scaled(q_rot):
    a0 = np.matmul(np.swapaxes(q_rot, -1, -2), q_rot) / q_rot.shape[-2]
    return 0.5 * (a0 + np.swapaxes(a0, -1, -2))


def _density_outer_rows(q_rot):
    # the Gram of the rows (Q Q^T) where the Gram of the columns (Q^T Q) is meant
    a0 = np.matmul(q_rot, np.swapaxes(q_rot, -1, -2))
    return 0.5 * (a0 + np.swapaxes(a0, -1, -2))


def _softmax_variant(variant: str):
    def masked_softmax(logits, *, overwrite_input=False):
        x = np.asarray(logits, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            if variant == "no_max":
                e = np.exp(x)
                return e / np.sum(e, axis=-1, keepdims=True)
            m = np.max(x, axis=-1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            e = np.exp(x - m)
            z = np.sum(e, axis=-1, keepdims=True)
            if variant == "plus_one":
                return e / (z + 1.0)
            if variant == "axis":
                axis = -2 if e.ndim >= 2 else -1  # normalized over the query axis of a batch of rows
                zz = np.sum(e, axis=axis, keepdims=True)
                return e / np.where(zz == 0, 1.0, zz)
            return e / np.where(z == 0, 1.0, z)

    return _replace(masked_softmax)


def _apply_mask_inverted(scores, mask, mode, mask_value=-1e9):
    from pldr_ref.attention import FINFO_MIN_F64

    if mask is None:
        return scores
    inv = ~np.asarray(mask, dtype=bool)
    if mode == "ideal":
        return np.where(inv, -np.inf, scores)
    if mode == "additive":
        return scores + mask_value * inv.astype(np.float64)
    return scores + np.where(inv, FINFO_MIN_F64, 0.0)


def _rope_variant(variant: str):
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def apply_rope(x, positions, *, layout="interleaved", precision="exact", base=10000.0):
            pos = np.asarray(positions)
            if variant == "sign":
                return original(x, -pos, layout=layout, precision=precision, base=base)
            if variant == "shift":
                return original(x, pos + 1, layout=layout, precision=precision, base=base)
            return original(x, pos, layout=layout, precision=precision, base=base)

        return apply_rope

    return make


def _rope_frequencies_half(d_k, base, precision="exact"):
    return np.power(float(base), -np.arange(0, d_k, 2, dtype=np.float64) / (2 * d_k))


def _scores_variant(variant: str):
    def attention_scores(q_rot, g_lm, k_rot):
        d_k = q_rot.shape[-1]
        g = np.swapaxes(g_lm, -1, -2) if variant == "g_transposed" else g_lm
        qg = np.matmul(q_rot[..., None, :], g)[..., 0, :] if g.ndim == 5 else np.matmul(q_rot, g)
        scale = d_k if variant == "scale" else math.sqrt(d_k)
        return np.matmul(qg, np.swapaxes(k_rot, -1, -2)) / scale

    return _replace(attention_scores)


def _metric_learner_columns(a0, lp, kind, config):
    from pldr_ref.metric_learner import metric_learner_v500, metric_learner_v900

    fn = metric_learner_v500 if kind == "v500" else metric_learner_v900
    return np.swapaxes(fn(np.swapaxes(a0, -1, -2), lp, config), -1, -2)


def _notears_unsquared(m):
    from pldr_ref.dag import _check_square

    a = _check_square(m)
    return np.real(np.trace(np.asarray([_expm(b) for b in a.reshape(-1, *a.shape[-2:])]), axis1=-2, axis2=-1)
                   ).reshape(a.shape[:-2]) - a.shape[-1]


def _expm(m: np.ndarray) -> np.ndarray:
    import scipy.linalg

    return scipy.linalg.expm(m)


def _dag_log(m):
    from pldr_ref.dag import notears_h

    a = np.asarray(m, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(notears_h(a)) / a.shape[-1])


def _g_cache_stale(output):
    from pldr_ref.inference.cache import GCache, LayerG

    first = output.layers[0]
    return GCache(tuple(LayerG(first.A_LM, first.A_P, first.G_LM) for _ in output.layers))


def _prefix_first_row(params, token_ids, start=1):
    from pldr_ref.model import forward

    # each prefix call reports its first row instead of its last (getHead for getLast)
    ids = np.asarray(token_ids).reshape(-1, np.shape(token_ids)[-1])
    rows = [forward(params, ids[:, :t]).logits[:, 0] for t in range(start, ids.shape[1] + 1)]
    return np.stack(rows, axis=1)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("ln_variance_ddof1", "pldr_ref.norms.layer_norm", "variance divides by d - 1", _ln("ddof1")),
    Mutant("ln_eps_outside_sqrt", "pldr_ref.norms.layer_norm", "(x - mu) / (sqrt(var) + eps)", _ln("eps_outside")),
    Mutant("ln_eps_dropped", "pldr_ref.norms.layer_norm", "eps ignored", _ln("no_eps")),
    Mutant("ln_beta_dropped", "pldr_ref.norms.layer_norm", "beta ignored", _ln("no_beta")),
    Mutant("ln_uncentred", "pldr_ref.norms.layer_norm", "x / sqrt(var + eps) (mean not subtracted)", _ln("uncentred")),
    Mutant("iswiglu_sigmoid_sign", "pldr_ref.activations.iswiglu", "u^2 sigma(-u)", _replace(_iswiglu_sigmoid_sign)),
    Mutant("iswiglu_negated", "pldr_ref.activations.iswiglu", "-u^2 sigma(u)", _replace(_iswiglu_negated)),
    Mutant("sigmoid_sign", "pldr_ref.activations.sigmoid", "sigma(-u)", _replace(_sigmoid_sign)),
    Mutant("eps_adj_dropped", "pldr_ref.plga.metric_tensor", "A_LM = iSwiGLU(W A + b)", _replace(_metric_no_eps)),
    Mutant("eps_adj_inside", "pldr_ref.plga.metric_tensor", "A_LM = iSwiGLU(W A + b + eps)",
           _replace(_metric_eps_inside)),
    Mutant("p_transposed", "pldr_ref.plga.potential_tensor", "A_LM^(o P^T)", _replace(_potential_p_transposed)),
    Mutant("p_abs", "pldr_ref.plga.potential_tensor", "A_LM^(o |P|)", _replace(_potential_abs_exponent)),
    Mutant("b_a_dropped", "pldr_ref.plga.energy_curvature", "G_LM = a A_P (b_a dropped)", _replace(_energy_no_b_a)),
    Mutant("energy_right_side", "pldr_ref.plga.energy_curvature", "G_LM = A_P a + b_a (a on the wrong side)",
           _replace(_energy_right_side)),
    Mutant("p_head0", "pldr_ref.plga.potential_tensor", "every head raised to head 0's P",
           _replace(_potential_head0)),
    Mutant("silu_slope", "pldr_ref.activations.silu", "silu(z) = z sigma(1.702 z)", _replace(_silu_slope)),
    Mutant("finfo_min_row_neg_inf", "pldr_ref.attention.apply_mask", "a fully masked finfo_min row is -inf",
           _make_mask_row_neg_inf),
    Mutant("gram_scaled", "pldr_ref.density.density_operator", "A0 = Q^T Q / S", _replace(_density_scaled)),
    Mutant("gram_rows", "pldr_ref.density.density_operator", "A0 = Q Q^T (rows' Gram)", _replace(_density_outer_rows)),
    Mutant("softmax_no_max", "pldr_ref.attention.masked_softmax", "no max subtraction", _softmax_variant("no_max")),
    Mutant("softmax_norm_plus_one", "pldr_ref.attention.masked_softmax", "divides by sum + 1",
           _softmax_variant("plus_one")),
    Mutant("softmax_axis", "pldr_ref.attention.masked_softmax", "normalized over axis -2 (queries), not -1",
           _softmax_variant("axis")),
    Mutant("mask_inverted", "pldr_ref.attention.apply_mask", "mask polarity inverted", _replace(_apply_mask_inverted)),
    Mutant("rope_angle_sign", "pldr_ref.rope.apply_rope", "rotation by -n theta", _rope_variant("sign")),
    Mutant("rope_position_shift", "pldr_ref.rope.apply_rope", "positions off by one", _rope_variant("shift")),
    Mutant("rope_frequency_exponent", "pldr_ref.rope.rope_frequencies", "theta_a = base^(-a/d_k)",
           _replace(_rope_frequencies_half)),
    Mutant("score_scale_dk", "pldr_ref.attention.attention_scores", "scores / d_k instead of / sqrt(d_k)",
           _scores_variant("scale")),
    Mutant("g_transposed", "pldr_ref.attention.attention_scores", "Q G^T K^T", _scores_variant("g_transposed")),
    Mutant("metric_learner_columns", "pldr_ref.metric_learner.metric_learner", "row map applied to columns",
           _replace(_metric_learner_columns)),
    Mutant("notears_unsquared", "pldr_ref.dag.notears_h", "h = tr e^M - d (M o M dropped)",
           _replace(_notears_unsquared)),
    Mutant("dag_loss_log", "pldr_ref.dag.dag_loss", "D = log(h / d) instead of log1p(h / d)", _replace(_dag_log)),
    Mutant("g_cache_stale", "pldr_ref.inference.cache.g_cache_from_output", "every layer caches layer 0's G",
           _replace(_g_cache_stale)),
    Mutant("online_first_row", "pldr_ref.inference.scoring.prefix_final_row_logits",
           "each prefix call reports its first row, not its last", _replace(_prefix_first_row)),
)


@dataclasses.dataclass(frozen=True)
class MutantResult:
    """Which mirrors of the mutant's own Lean file (and which others) failed with the mutant in place."""

    mutant: Mutant
    own: tuple[str, ...]  # checks of the operator's Lean file run
    caught_by: tuple[str, ...]  # those that failed

    @property
    def caught(self) -> bool:
        return bool(self.caught_by)


def run_mutants(profile: str = "ci", progress: Callable[[str], None] | None = None,
                only: str | None = None) -> list[MutantResult]:
    """Run every mutant against the mirrors of its operator's Lean file (positive runs, no controls)."""
    import warnings

    from proofs_check.catalog import LEAN_FILE_OF
    from proofs_check.profiles import no_shrinking
    from proofs_check.registry import all_checks, run_check

    checks = all_checks()
    results = []
    baseline: dict[str, bool] = {}
    for mutant in MUTANTS:
        if only and only not in mutant.name:
            continue
        own = tuple(c for c in checks if any(LEAN_FILE_OF[n] == mutant.lean_file for n in c.lean))
        for check in own:  # a mirror that fails without the bug cannot be credited with catching it
            if check.name not in baseline:
                baseline[check.name] = run_check(check, profile, controls=False).passed
        own = tuple(c for c in own if baseline[c.name])
        _, _, original = _resolve(mutant.operator)
        caught = []
        with patched(mutant.operator, mutant.make(original)), warnings.catch_warnings(), \
                np.errstate(all="ignore"), no_shrinking():
            warnings.simplefilter("ignore")
            for check in own:
                if not run_check(check, profile, controls=False).passed:
                    caught.append(check.name)
        results.append(MutantResult(mutant, tuple(c.name for c in own), tuple(caught)))
        if progress is not None:
            progress(mutant.name)
    return results


def mutation_table(results: list[MutantResult]) -> list[tuple[str, str, str, str, str]]:
    """(mutant, operator, bug, Lean file, caught by) rows."""
    return [(r.mutant.name, r.mutant.operator, r.mutant.description, r.mutant.lean_file,
             f"{len(r.caught_by)}/{len(r.own)}: " + (", ".join(r.caught_by) or "NOT CAUGHT")) for r in results]
