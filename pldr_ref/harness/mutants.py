"""Deliberately broken variants of the torch backend: the harness's own negative controls.

Each mutant overrides exactly one method of :class:`~pldr_ref.backends.torch_backend.TorchBackend`
with a bug that real ports of PLDR-LLM make, and names the golden case, the dtype and the stage at
which the harness must catch it.  ``tests/test_harness_mutants.py`` runs them all;
``python -m pldr_ref.harness.mutants --markdown docs/mutations.md`` writes the report
``docs/mutations.md``.  Any mutant can also be validated by hand, e.g.
``pldr-ref validate --backend pldr_ref.harness.mutants:NoScaleMutant --dtype float64 -k tiny``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from typing import Any

from pldr_ref.backends.torch_backend import TorchBackend


class RopeLayoutMutant(TorchBackend):
    """RoPE pairs (x_i, x_{i+d/2}) (half-split) where the config says interleaved, and vice versa."""

    name = "mutant-rope-layout"

    def rope_pairs(self, x: Any, layout: str) -> tuple[Any, Any]:
        return super().rope_pairs(x, "half" if layout == "interleaved" else "interleaved")

    def rope_unpairs(self, y1: Any, y2: Any, layout: str) -> Any:
        return super().rope_unpairs(y1, y2, "half" if layout == "interleaved" else "interleaved")


class CachedRopeOffsetMutant(TorchBackend):
    """Cached steps rotate the new token at position T + 1 instead of T (off by one)."""

    name = "mutant-cached-rope-offset"

    def cached_positions(self, cache_length: int, num_new: int) -> Any:
        return super().cached_positions(cache_length + 1, num_new)


class ElementwiseGMutant(TorchBackend):
    """G_LM = a * A_P + b_a elementwise instead of the matrix product a A_P."""

    name = "mutant-elementwise-g"

    def energy_curvature(self, a_p: Any, a: Any, b_a: Any) -> Any:
        return (self.per_head(a, a_p) * a_p + self.per_head(b_a, a_p)).to(a.dtype)


class NoEpsAdjMutant(TorchBackend):
    """A_LM = iSwiGLU(W A + b) without the + eps_adj (1e-9)."""

    name = "mutant-no-eps-adj"

    def metric_tensor(self, a: Any, W: Any, b: Any, eps_adj: float) -> Any:
        return super().metric_tensor(a, W, b, 0.0)


class A0NormAxisMutant(TorchBackend):
    """The first metric-learner LayerNorm normalises the columns of A0 (axis -2) instead of its rows."""

    name = "mutant-a0-norm-axis"

    def a0_norm(self, a0: Any, gamma: Any, beta: Any, eps: float) -> Any:
        mu = a0.mean(dim=-2, keepdim=True)
        var = ((a0 - mu) ** 2).mean(dim=-2, keepdim=True)
        return (a0 - mu) / self.torch.sqrt(var + eps) * gamma + beta


class KeyGramMutant(TorchBackend):
    """The density operator sums the rotated keys K~^T K~ instead of the queries Q~^T Q~."""

    name = "mutant-key-gram"

    def gram_rows(self, q_rot: Any, k_rot: Any) -> Any:
        return k_rot


class NoScaleMutant(TorchBackend):
    """Scores without the 1 / sqrt(d_k) factor."""

    name = "mutant-no-scale"

    def attention_scores(self, q_rot: Any, g_lm: Any, k_rot: Any) -> Any:
        return super().attention_scores(q_rot, g_lm, k_rot) * math.sqrt(q_rot.shape[-1])


class Float16MaskOverflowMutant(TorchBackend):
    """Additive mask as scores + c * M with c = -1e9 cast to the compute dtype: in float16 c = -inf and
    -inf * 0 = NaN on every allowed position (float32 / float64 hide the bug)."""

    name = "mutant-mask-overflow"

    def apply_mask(self, scores: Any, mask: Any | None, config: Any) -> Any:
        if mask is None or config.mask_mode != "additive":
            return super().apply_mask(scores, mask, config)
        dt = self.storage_dtype(scores.dtype)  # the constant held in the 16-bit storage dtype
        c = self.torch.tensor(config.mask_value, dtype=dt, device=scores.device)
        return (scores.to(dt) + c * mask.to(dt)).to(scores.dtype)


class GCacheIgnoredMutant(TorchBackend):
    """Calls after the prompt pass recompute A_LM, A_P, G_LM instead of reading the G cache."""

    name = "mutant-g-cache-ignored"

    def frozen_g(self, g_cache: Any, layer: int, cached_step: bool) -> Any:
        return None if cached_step else super().frozen_g(g_cache, layer, cached_step)


class SoftmaxAxisMutant(TorchBackend):
    """Softmax over the query axis (-2) instead of the key axis (-1)."""

    name = "mutant-softmax-axis"

    def softmax(self, logits: Any) -> Any:
        return super().softmax(logits.transpose(-1, -2)).transpose(-1, -2)


class LayerNormEpsMutant(TorchBackend):
    """Every LayerNorm uses eps = 1e-5 (the PyTorch default) instead of the model's 1e-6."""

    name = "mutant-layernorm-eps"

    def layer_norm(self, x: Any, gamma: Any, beta: Any, eps: float) -> Any:
        return super().layer_norm(x, gamma, beta, 1e-5)


@dataclasses.dataclass(frozen=True)
class Mutation:
    """A mutant with the case and dtype that must expose it and the stage it must be localized to."""

    backend: type
    case: str
    dtype: str
    expected_stage: str


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(RopeLayoutMutant, "model/tiny_exact", "float64", "rope"),
    Mutation(CachedRopeOffsetMutant, "cache/tiny_kv_g", "float64", "rope"),
    Mutation(ElementwiseGMutant, "model/tiny_exact", "float64", "energy_curvature"),
    Mutation(NoEpsAdjMutant, "model/tiny_exact", "float64", "metric_tensor"),
    Mutation(A0NormAxisMutant, "model/tiny_exact", "float64", "metric_learner"),
    Mutation(KeyGramMutant, "model/tiny_exact", "float64", "density_operator"),
    Mutation(NoScaleMutant, "model/tiny_exact", "float64", "attention_scores"),
    Mutation(Float16MaskOverflowMutant, "layer/tiny_l1_mask_additive", "float16", "masked_softmax"),
    Mutation(GCacheIgnoredMutant, "cache/tiny_g", "float64", "metric_tensor"),
    Mutation(SoftmaxAxisMutant, "model/tiny_exact", "float64", "masked_softmax"),
    Mutation(LayerNormEpsMutant, "model/tiny_exact", "float64", "input_norm"),
)


@dataclasses.dataclass(frozen=True)
class MutationOutcome:
    """What the harness said about one mutant (and about the unmutated backend on the same case)."""

    mutation: Mutation
    status: str
    caught_stage: str | None
    caught_layer: int | None
    found_by: str | None
    output: str | None
    control_status: str

    @property
    def ok(self) -> bool:
        """Flagged, localized to the expected stage, and the unmutated backend passes the same case."""
        return self.status == "fail" and self.caught_stage == self.mutation.expected_stage and \
            self.control_status == "pass"


def run_mutations(root: Any = None, device: str | None = "cpu", dtype: str | None = None) -> list[MutationOutcome]:
    """Validate every mutant (and the unmutated backend as control) on its case; cases from ``root``.

    ``dtype`` overrides each mutation's own dtype (to see what a lower precision still catches).
    """
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
    from pldr_ref.harness.validate import validate_case

    base = DEFAULT_GOLDEN_DIR if root is None else root
    control = TorchBackend(device=device)
    cases: dict[str, Any] = {}
    controls: dict[tuple[str, str], str] = {}
    out = []
    for m in MUTATIONS:
        if dtype is not None:
            m = dataclasses.replace(m, dtype=dtype)
        if m.case not in cases:
            path = base / m.case
            if not (path / "case.json").is_file():
                raise FileNotFoundError(f"golden case {m.case} needed by {m.backend.__name__} is missing under {base}")
            cases[m.case] = load_case(path)
        case = cases[m.case]
        if (m.case, m.dtype) not in controls:
            controls[(m.case, m.dtype)] = validate_case(control, case, m.dtype).status
        r = validate_case(m.backend(device=device), case, m.dtype)
        f = r.first_failure or {}
        out.append(MutationOutcome(m, r.status, f.get("stage"), f.get("layer"), f.get("found_by"), f.get("output"),
                                   controls[(m.case, m.dtype)]))
    return out


def markdown(outcomes: list[MutationOutcome]) -> str:
    """The mutation report (``docs/mutations.md``)."""
    lines = [
        "# Mutation suite: the harness catches and localizes deliberately broken backends",
        "",
        "Generated by `python -m pldr_ref.harness.mutants --markdown docs/mutations.md` (checked by",
        "`tests/test_harness_mutants.py`). Each mutant is the torch backend",
        "(`pldr_ref.backends.torch_backend:TorchBackend`) with exactly one method overridden",
        "(`pldr_ref/harness/mutants.py`). *Caught at* is the first failing stage the harness reports:",
        "found by *isolation* (the stage run alone from golden upstream values fails) or, for cache",
        "cases whose steps are not isolated, by *end_to_end* (the first diverging trace entry in forward",
        "order). *Control* is the unmutated backend on the same case and dtype.",
        "",
        "| mutant | bug | case | dtype | expected stage | caught at | found by | first bad output | control |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        m = o.mutation
        doc = " ".join((m.backend.__doc__ or "").split())
        where = "-" if o.caught_stage is None else o.caught_stage + (
            f" (layer {o.caught_layer})" if o.caught_layer is not None else "")
        lines.append(f"| `{m.backend.__name__}` | {doc} | `{m.case}` | {m.dtype} | {m.expected_stage} | {where} | "
                     f"{o.found_by or '-'} | `{o.output or '-'}` | {o.control_status} |")
    n_ok = sum(o.ok for o in outcomes)
    lines += ["", f"{n_ok} of {len(outcomes)} mutants flagged and localized to the expected stage; "
                  "the unmutated backend passes every case used.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: print (or write with --markdown) the mutation report; exit 1 unless every mutant is caught."""
    p = argparse.ArgumentParser(prog="python -m pldr_ref.harness.mutants", description=__doc__)
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the report to PATH")
    p.add_argument("--suite", default=None, metavar="DIR", help="golden folder (default: the committed golden/)")
    p.add_argument("--dtype", default=None, help="run every mutant in this dtype instead of its own (exploration: "
                                                 "the exit status then ignores the expected stages)")
    args = p.parse_args(argv)
    from pathlib import Path

    outcomes = run_mutations(None if args.suite is None else Path(args.suite), dtype=args.dtype)
    text = markdown(outcomes)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0 if args.dtype is not None or all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
