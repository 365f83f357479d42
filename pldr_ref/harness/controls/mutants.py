"""Deliberately broken variants of the torch backend: the harness's own negative controls.

Each mutant overrides exactly one method of :class:`~pldr_ref.backends.torch_backend.TorchBackend`
with a bug that real ports of PLDR-LLM make, and names the golden case, the dtype and the stage at
which the harness must catch it.  ``tests/test_harness_mutants.py`` runs them all;
``python -m pldr_ref.harness.controls.mutants --markdown docs/mutations.md`` writes the report
``docs/mutations.md``.  Any mutant can also be validated by hand, e.g.
``pldr-ref validate --backend pldr_ref.harness.controls.mutants:NoScaleMutant --dtype float64 -k tiny``.
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


class UnbiasedVarianceLayerNormMutant(TorchBackend):
    """Every LayerNorm divides by sqrt(unbiased variance + eps) (torch.var default): outputs scaled by
    sqrt((n-1)/n), 3.2 % for d = 16 -- a systematic error, no outlier."""

    name = "mutant-unbiased-variance"

    def layer_norm(self, x: Any, gamma: Any, beta: Any, eps: float) -> Any:
        mu = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=True)
        return (x - mu) / self.torch.sqrt(var + eps) * gamma + beta


class RopeOnValuesMutant(TorchBackend):
    """Layer glue: the values are rotated by RoPE too (every stage is right in isolation)."""

    name = "mutant-rope-on-values"

    def value_rows(self, v: Any, positions: Any, config: Any) -> Any:
        return self.rope(v, positions, config)


class MaskOffByOneMutant(TorchBackend):
    """Causal mask lets query i see key i + 1 (off by one)."""

    name = "mutant-mask-off-by-one"

    def causal_padding_mask(self, query_positions: Any, key_positions: Any, key_padding: Any | None) -> Any:
        return super().causal_padding_mask(query_positions + 1, key_positions, key_padding)


class MaskIgnoredMutant(TorchBackend):
    """The attention mask is never applied (scores go to the softmax unmasked)."""

    name = "mutant-mask-ignored"

    def apply_mask(self, scores: Any, mask: Any | None, config: Any) -> Any:
        return scores


class PaddingIgnoredMutant(TorchBackend):
    """Padding keys are not masked (causal part only)."""

    name = "mutant-padding-ignored"

    def key_padding(self, ids: Any, config: Any, attention_mask: Any | None, pad_masking: bool) -> Any:
        return self.torch.zeros(ids.shape, dtype=self.torch.bool, device=self.device)


class PositionsFromOneMutant(TorchBackend):
    """Positions of an uncached call start at start_pos + 1 (1-based positions)."""

    name = "mutant-positions-from-one"

    def call_positions(self, start_pos: int, num: int) -> Any:
        return super().call_positions(start_pos + 1, num)


class RopeBaseMutant(TorchBackend):
    """RoPE frequencies with base 500000 (Llama 3) instead of the model's 10000."""

    name = "mutant-rope-base"

    def rope_table(self, positions: Any, d_k: int, base: float, precision: str) -> tuple[Any, Any]:
        return super().rope_table(positions, d_k, 500000.0, precision)


class RopeDirectionMutant(TorchBackend):
    """RoPE rotates by -phi (sin with the wrong sign)."""

    name = "mutant-rope-direction"

    def rope_table(self, positions: Any, d_k: int, base: float, precision: str) -> tuple[Any, Any]:
        cos, sin = super().rope_table(positions, d_k, base, precision)
        return cos, -sin


class NoAttentionResidualMutant(TorchBackend):
    """O1 = LN1(Y) without the residual + X (both residual sums dropped)."""

    name = "mutant-no-residual"

    def residual(self, y: Any, x: Any) -> Any:
        return y


class GluGateSwapMutant(TorchBackend):
    """FFN gate on the wrong branch: W3((W1 x + b1) * silu(W2 x + b2))."""

    name = "mutant-glu-gate-swap"

    def glu(self, x: Any, P: Any, prefix: str) -> Any:
        h1 = self.linear(x, P[f"{prefix}gluw1.weight"], P.get(f"{prefix}gluw1.bias"))
        h2 = self.linear(x, P[f"{prefix}gluw2.weight"], P.get(f"{prefix}gluw2.bias"))
        return self.linear(h1 * self.silu(h2), P[f"{prefix}gluw3.weight"], P.get(f"{prefix}gluw3.bias"))


class SwiGLUForISwiGLUMutant(TorchBackend):
    """A_LM from SiLU instead of iSwiGLU (z sigma(z) instead of z^2 sigma(z))."""

    name = "mutant-swiglu-for-iswiglu"

    def iswiglu(self, z: Any) -> Any:
        return self.silu(z)


class NegatedPowerMutant(TorchBackend):
    """A_P = A_LM ** (-P) (sign of the learned exponent flipped)."""

    name = "mutant-negated-power"

    def potential_tensor(self, a_lm: Any, P: Any) -> Any:
        return super().potential_tensor(a_lm, -P)


class TransposedGMutant(TorchBackend):
    """Scores with G_LM^T: Q~ G^T K~^T (G_LM is not symmetric)."""

    name = "mutant-transposed-g"

    def attention_scores(self, q_rot: Any, g_lm: Any, k_rot: Any) -> Any:
        return super().attention_scores(q_rot, g_lm.transpose(-1, -2), k_rot)


class NoBaMutant(TorchBackend):
    """G_LM = a A_P without the bias b_a."""

    name = "mutant-no-ba"

    def energy_curvature(self, a_p: Any, a: Any, b_a: Any) -> Any:
        return super().energy_curvature(a_p, a, self.torch.zeros_like(b_a))


class EmbedNoScaleMutant(TorchBackend):
    """X0 = E[x] without the sqrt(d) factor."""

    name = "mutant-embed-no-scale"

    def embedding_scale(self, config: Any) -> float:
        return 1.0


class NoOutputBiasMutant(TorchBackend):
    """Every linear layer drops its bias (attention projections, FFN, head)."""

    name = "mutant-no-bias"

    def linear(self, x: Any, w: Any, b: Any | None) -> Any:
        return super().linear(x, w, None)


class HeadMergeOrderMutant(TorchBackend):
    """Heads merged feature-major ([B, S, d_k, H] flattened) instead of head-major."""

    name = "mutant-head-merge-order"

    def merge_heads(self, z: Any) -> Any:
        b, h, s, dk = z.shape
        return z.permute(0, 2, 3, 1).reshape(b, s, h * dk)


class HeadSplitOrderMutant(TorchBackend):
    """Heads split feature-major: feature f goes to head f mod H instead of f // d_k."""

    name = "mutant-head-split-order"

    def split_heads(self, x: Any, num_heads: int) -> Any:
        b, s, d = x.shape
        return x.reshape(b, s, d // num_heads, num_heads).permute(0, 3, 1, 2)


class NoResidualUnitSkipMutant(TorchBackend):
    """Metric-learner residual units without their skip connection: A <- LN(GLU(...(A)))."""

    name = "mutant-res-unit-no-skip"

    def residual_unit(self, a: Any, P: Any, prefix: str, num_dense: int, eps: float) -> Any:
        h = a
        for j in range(num_dense):
            h = self.glu(h, P, f"{prefix}denseAs.{j}.")
        return self.layer_norm(h, P[f"{prefix}layernormA.weight"], P[f"{prefix}layernormA.bias"], eps)


class CumulativeGramExclusiveMutant(TorchBackend):
    """Cumulative Gram without the current row: A0_i = sum_{s < i} q~_s q~_s^T."""

    name = "mutant-cumulative-gram-exclusive"

    def cumulative_density(self, q_rot: Any) -> Any:
        inclusive = super().cumulative_density(q_rot)
        return inclusive - q_rot[..., :, None] * q_rot[..., None, :]


class ScaleByDModelMutant(TorchBackend):
    """Scores divided by sqrt(d_model) instead of sqrt(d_k)."""

    name = "mutant-scale-d-model"

    def attention_scores(self, q_rot: Any, g_lm: Any, k_rot: Any) -> Any:
        h = q_rot.shape[1]
        return super().attention_scores(q_rot, g_lm, k_rot) / math.sqrt(h)


class PreNormLogitsMutant(TorchBackend):
    """Logits read from the last layer's state before its final LayerNorm (O1 + FFN(O1) instead of O2)."""

    name = "mutant-pre-norm-logits"

    def decoder_layer(self, P: Any, layer: int, x: Any, config: Any, **kwargs: Any) -> dict[str, Any]:
        t = super().decoder_layer(P, layer, x, config, **kwargs)
        if layer == config.num_layers - 1:  # the state the LM head will wrongly read, kept for this call only
            self._pre_norm = self.residual(t["ffn_out"], t["out1"])
        return t

    def lm_head(self, P: Any, hidden: Any) -> Any:
        pre = self.__dict__.pop("_pre_norm", None)  # an isolated lm_head stage has no layer before it
        return super().lm_head(P, hidden if pre is None else pre)


class LogitsOnly:
    """Mixin: the backend returns only the primary outputs (logits of every call, a layer's out2, op results)
    and declares no isolated stages and ``full_trace=False`` -- what the harness sees of a serving engine."""

    def capabilities(self) -> Any:
        return dataclasses.replace(super().capabilities(), stages=(), full_trace=False)

    def run_case(self, case: Any, dtype: str) -> dict[str, Any]:
        from pldr_ref.harness.protocol import primary_outputs

        keep = set(primary_outputs(case))
        return {k: v for k, v in super().run_case(case, dtype).items() if k in keep}


def _logits_only(cls: type) -> type:
    doc = f"Logits-only {cls.__name__}: " + " ".join((cls.__doc__ or "").split())
    return type(f"LogitsOnly{cls.__name__}", (LogitsOnly, cls), {"name": f"logits-only-{cls.name}", "__doc__": doc,
                                                                 "__module__": __name__})


LogitsOnlyNoScaleMutant = _logits_only(NoScaleMutant)
LogitsOnlyRopeLayoutMutant = _logits_only(RopeLayoutMutant)
LogitsOnlyUnbiasedVarianceLayerNormMutant = _logits_only(UnbiasedVarianceLayerNormMutant)
LogitsOnlyMaskOffByOneMutant = _logits_only(MaskOffByOneMutant)
LogitsOnlyElementwiseGMutant = _logits_only(ElementwiseGMutant)
LogitsOnlyCachedRopeOffsetMutant = _logits_only(CachedRopeOffsetMutant)
LogitsOnlyPreNormLogitsMutant = _logits_only(PreNormLogitsMutant)


@dataclasses.dataclass(frozen=True)
class Mutation:
    """A mutant with the case and dtype that must expose it and the stage it must be localized to."""

    backend: type
    case: str
    dtype: str
    expected_stage: str


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(RopeLayoutMutant, "model/tiny_exact", "float64", "rope"),
    Mutation(CachedRopeOffsetMutant, "cache/narrow_kv_g_learned_g", "float64", "rope"),
    Mutation(ElementwiseGMutant, "model/tiny_exact", "float64", "energy_curvature"),
    Mutation(NoEpsAdjMutant, "model/tiny_exact", "float64", "metric_tensor"),
    Mutation(A0NormAxisMutant, "model/tiny_exact", "float64", "metric_learner"),
    Mutation(KeyGramMutant, "model/tiny_exact", "float64", "density_operator"),
    Mutation(NoScaleMutant, "model/tiny_exact", "float64", "attention_scores"),
    Mutation(Float16MaskOverflowMutant, "layer/tiny_l1_mask_additive", "float16", "masked_softmax"),
    Mutation(GCacheIgnoredMutant, "cache/narrow_g_learned_g", "float64", "metric_tensor"),
    Mutation(SoftmaxAxisMutant, "model/tiny_exact", "float64", "masked_softmax"),
    Mutation(LayerNormEpsMutant, "model/tiny_exact", "float64", "input_norm"),
    Mutation(UnbiasedVarianceLayerNormMutant, "model/tiny_exact", "float64", "input_norm"),
    Mutation(RopeOnValuesMutant, "model/tiny_exact", "float64", "qkv_projection"),
    Mutation(MaskOffByOneMutant, "model/tiny_exact", "float64", "sequence_mask"),
    Mutation(MaskIgnoredMutant, "model/tiny_exact", "float64", "masked_softmax"),
    Mutation(PaddingIgnoredMutant, "model/tiny_padded_exact", "float64", "sequence_mask"),
    Mutation(PositionsFromOneMutant, "model/tiny_exact", "float64", "sequence_mask"),
    Mutation(RopeBaseMutant, "model/tiny_exact", "float64", "rope"),
    Mutation(RopeDirectionMutant, "model/tiny_exact", "float64", "rope"),
    Mutation(NoAttentionResidualMutant, "model/tiny_exact", "float64", "post_attention_norm"),
    Mutation(GluGateSwapMutant, "model/tiny_exact", "float64", "metric_learner"),
    Mutation(SwiGLUForISwiGLUMutant, "model/tiny_exact", "float64", "metric_tensor"),
    Mutation(NegatedPowerMutant, "model/tiny_exact", "float64", "potential_tensor"),
    Mutation(TransposedGMutant, "model/tiny_exact", "float64", "attention_scores"),
    Mutation(NoBaMutant, "model/tiny_exact", "float64", "energy_curvature"),
    Mutation(EmbedNoScaleMutant, "model/tiny_exact", "float64", "embedding"),
    Mutation(NoOutputBiasMutant, "model/tiny_exact", "float64", "qkv_projection"),
    Mutation(HeadMergeOrderMutant, "model/tiny_exact", "float64", "value_mix"),
    Mutation(HeadSplitOrderMutant, "model/tiny_exact", "float64", "qkv_projection"),
    Mutation(NoResidualUnitSkipMutant, "model/tiny_exact", "float64", "metric_learner"),
    Mutation(CumulativeGramExclusiveMutant, "layer/tiny_cumulative_gram", "float64", "density_operator"),
    Mutation(ScaleByDModelMutant, "model/tiny_exact", "float64", "attention_scores"),
    Mutation(PreNormLogitsMutant, "model/tiny_identity_g_short", "float64", "lm_head"),
    Mutation(LogitsOnlyNoScaleMutant, "model/tiny_identity_g_short", "float64", "lm_head"),
    Mutation(LogitsOnlyRopeLayoutMutant, "model/tiny_identity_g_short", "float64", "lm_head"),
    Mutation(LogitsOnlyUnbiasedVarianceLayerNormMutant, "model/tiny_identity_g_short", "float64", "lm_head"),
    Mutation(LogitsOnlyMaskOffByOneMutant, "model/tiny_identity_g_short", "float64", "lm_head"),
    Mutation(LogitsOnlyElementwiseGMutant, "model/tiny_exact", "float64", "lm_head"),
    Mutation(LogitsOnlyCachedRopeOffsetMutant, "cache/narrow_kv_g_learned_g", "float64", "lm_head"),
    Mutation(LogitsOnlyPreNormLogitsMutant, "model/tiny_identity_g_short", "float64", "lm_head"),
)


#: Every dtype the mutation table covers.
TABLE_DTYPES = ("float64", "float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class DtypeOutcome:
    """What the harness said about a mutant on its case in one dtype, and the unmutated backend's status."""

    status: str
    caught_stage: str | None
    caught_layer: int | None
    found_by: str | None
    output: str | None
    control_status: str

    def cell(self) -> str:
        """Short table cell: ``fail @ stage`` / ``pass`` / ``not_judgeable`` ..."""
        if self.status == "fail":
            where = self.caught_stage or self.output or "?"
            return f"**fail** @ {where}" + ("" if self.found_by == "isolation" else " (e2e)")
        return self.status


@dataclasses.dataclass(frozen=True)
class MutationOutcome:
    """What the harness said about one mutant: in its own dtype (the fields) and in every dtype (``by_dtype``)."""

    mutation: Mutation
    status: str
    caught_stage: str | None
    caught_layer: int | None
    found_by: str | None
    output: str | None
    control_status: str
    by_dtype: dict[str, DtypeOutcome] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Flagged, localized to the expected stage, and the unmutated backend passes the same case."""
        return self.status == "fail" and self.caught_stage == self.mutation.expected_stage and \
            self.control_status == "pass"


def run_mutations(root: Any = None, device: str | None = "cpu", dtype: str | None = None,
                  dtypes: tuple[str, ...] = ()) -> list[MutationOutcome]:
    """Validate every mutant (and the unmutated backend as control) on its case; cases from ``root``.

    ``dtype`` overrides each mutation's own dtype; ``dtypes`` adds the outcome in each of those dtypes
    (the mutant x dtype table of ``docs/mutations.md``).
    """
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
    from pldr_ref.harness.validate import validate_case

    base = DEFAULT_GOLDEN_DIR if root is None else root
    control = TorchBackend(device=device)
    cases: dict[str, Any] = {}
    manifests: dict[Any, dict[str, Any]] = {}  # MANIFEST.json read and checked once
    controls: dict[tuple[str, str], str] = {}
    out = []

    def one(backend: Any, case: Any, name: str, dt: str) -> DtypeOutcome:
        if (name, dt) not in controls:
            controls[(name, dt)] = validate_case(control, case, dt).status
        r = validate_case(backend, case, dt)
        f = r.first_failure or {}
        return DtypeOutcome(r.status, f.get("stage"), f.get("layer"), f.get("found_by"), f.get("output"),
                            controls[(name, dt)])

    for m in MUTATIONS:
        if dtype is not None:
            m = dataclasses.replace(m, dtype=dtype)
        if m.case not in cases:
            path = base / m.case
            if not (path / "case.json").is_file():
                raise FileNotFoundError(f"golden case {m.case} needed by {m.backend.__name__} is missing under {base}")
            cases[m.case] = load_case(path, manifests=manifests)
        case = cases[m.case]
        backend = m.backend(device=device)
        own = one(backend, case, m.case, m.dtype)
        table = {dt: (own if dt == m.dtype else one(backend, case, m.case, dt)) for dt in dtypes}
        out.append(MutationOutcome(m, own.status, own.caught_stage, own.caught_layer, own.found_by, own.output,
                                   own.control_status, table))
    return out


def markdown(outcomes: list[MutationOutcome]) -> str:
    """The mutation report (``docs/mutations.md``)."""
    dts = [d for d in TABLE_DTYPES if outcomes and d in outcomes[0].by_dtype]
    lines = [
        "# Mutation suite: the harness catches and localizes deliberately broken backends",
        "",
        "Generated by `python -m pldr_ref.harness.controls.mutants --markdown docs/mutations.md` (checked by",
        "`tests/test_harness_mutants.py`). Each mutant is the torch backend",
        "(`pldr_ref.backends.torch_backend:TorchBackend`, mixed precision below float32) with exactly one method",
        "overridden (`pldr_ref/harness/controls/mutants.py`); the `LogitsOnly*` mutants also return only the "
        "primary outputs",
        "and declare no isolated stages, as a serving engine would. *Expected* is the stage the harness must name",
        "on the mutation's case in float64. Each dtype column is the verdict on that case in that dtype:",
        "**fail** @ the first failing stage (found by isolation, or *(e2e)* by the first diverging output in",
        "forward order), `not_judgeable` (the primary output cannot be judged in that dtype and no isolated stage",
        "covers it: counts against the verdict), `pass` (the bug is below the dtype's resolution, e.g. eps_adj =",
        "1e-9, or does not change the math there, e.g. a float16 overflow in float64), `not_applicable`.",
        "*Control* is the unmutated backend on the same case in every dtype.",
        "",
        "| mutant | bug | case | expected | " + " | ".join(dts) + " | control |",
        "|---|---|---|---|" + "---|" * len(dts) + "---|",
    ]
    for o in outcomes:
        m = o.mutation
        doc = " ".join((m.backend.__doc__ or "").split())
        cells = [o.by_dtype[d].cell() for d in dts]
        ctrl = sorted({o.by_dtype[d].control_status for d in dts}) or [o.control_status]
        lines.append(f"| `{m.backend.__name__}` | {doc} | `{m.case}` | {m.expected_stage} | " + " | ".join(cells)
                     + f" | {'/'.join(ctrl)} |")
    n_ok = sum(o.ok for o in outcomes)
    lines += ["", f"{n_ok} of {len(outcomes)} mutants flagged in their own dtype and localized to the expected stage; "
                  "the unmutated backend passes every case used in that dtype.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: print (or write with --markdown) the mutation report; exit 1 unless every mutant is caught."""
    from pldr_ref.harness.protocol import DTYPES
    from pldr_ref.tool_cli import add_suite_arguments, run_tool, tool_parser

    p = tool_parser("python -m pldr_ref.harness.controls.mutants", __doc__)
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the report to PATH")
    add_suite_arguments(p)
    p.add_argument("--dtype", default=None, choices=DTYPES,
                   help="run every mutant in this dtype instead of its own (exploration: the exit status then "
                        "ignores the expected stages)")
    return run_tool(p, argv, _run)


def _run(args: argparse.Namespace) -> int:
    """The body of :func:`main`: the output path checked first."""
    from pldr_ref.output_paths import FILE, INPUT_FOLDER, atomic_write_text, check_command_paths
    from pldr_ref.tool_cli import suite_selection

    root, names = suite_selection(args, "python -m pldr_ref.harness.controls.mutants")
    if names is not None:
        raise ValueError("--suite NAME: the mutation table runs its own cases; give the folder with --suite-dir")
    check_command_paths([("--markdown", args.markdown, FILE)], [("--suite-dir", root, INPUT_FOLDER)])
    outcomes = run_mutations(root, dtype=args.dtype, dtypes=TABLE_DTYPES)
    text = markdown(outcomes)
    if args.markdown:
        atomic_write_text(args.markdown, text)
    else:
        sys.stdout.write(text)
    return 0 if args.dtype is not None or all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
