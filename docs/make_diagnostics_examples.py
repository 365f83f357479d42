"""Regenerate the worked examples of docs/diagnostics.md from the ``pldr-ref diagnose`` code.

Each example is a block between ``<!-- example:NAME:begin -->`` and ``<!-- example:NAME:end -->`` holding the
command that produced it and a table of its headline numbers.  Usage:

    python docs/make_diagnostics_examples.py            # rewrite every block in place (v510-110m: minutes)
    python docs/make_diagnostics_examples.py twirl g-lm  # only the named blocks

tests/test_diagnostics_docs.py regenerates the blocks and checks the numbers in the doc are current (within a
tolerance: the last printed digit and BLAS summation order may differ between machines).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

DOC = Path(__file__).resolve().parent / "diagnostics.md"

#: Dotted-key prefixes of the headline numbers of a model report.
MODEL_KEYS = (
    "sections.spectra.A.numerical_rank", "sections.spectra.A0.numerical_rank", "sections.spectra.A_LM.numerical_rank",
    "sections.spectra.G_LM.numerical_rank", "sections.spectra.A.sigma_2_over_sigma_1.median",
    "sections.spectra.A_cross_head_identity.median", "sections.spectra.A_row_identity_ratio.median",
    "sections.order-parameter.A.rms.median", "sections.order-parameter.A_LM.rms.median",
    "sections.order-parameter.G_LM.rms.median", "sections.order-parameter.G_LM.signed.median",
    "sections.layernorm.direct_rel.max", "sections.layernorm.proxy.max",
    "sections.twirl-energy.per_instance.offcommutant_suppression.median",
    "sections.twirl-energy.per_instance.commutant_fraction_unrotated.median",
    "sections.twirl-energy.per_instance.commutant_fraction_rotated.median",
    "sections.twirl-energy.stationarity_between_halves.median",
    "sections.contraction.composite_sigma_max.median", "sections.contraction.composite_sigma_max.max",
    "sections.contraction.per_unit_sigma_max.median", "sections.contraction.pairwise_within_prompt.median",
    "sections.contraction.pairwise_cross_prompt.median",
    "sections.decoding.dlogit.max", "sections.decoding.min_margin", "sections.decoding.argmax_agreement",
    "sections.decoding.n_prompts_criterion_holds", "sections.decoding.eps_G_max_by_layer",
    "sections.budget.C_G.median", "sections.budget.head_factor.max", "sections.budget.end_to_end_coefficient",
    "sections.budget.bound_at_eps_spec", "sections.budget.min_margin", "sections.budget.log10_bound_over_half_margin",
    "sections.dag.A_LM.summary.median", "sections.dag.A_P.summary.median", "sections.dag.G_LM.summary.median",
    "sections.online.historical_rows_after_suffix_change.relative", "sections.online.repeatability_max_abs",
    "sections.online.padding_at_gram_boundary.random_tokens.final_row_relative",
    "sections.online.block_vs_sequential.max_abs_logit_gap",
)
G_LM_KEYS = (
    "commutant_residual_median_by_layer", "commutant_residual_summary", "commutant_fraction_summary.median",
    "spectra.sigma_1.median", "spectra.sigma_2_over_sigma_1.median", "perron_frobenius.n_positive",
    "perron_frobenius.n_nonnegative", "perron_frobenius.min_entry.min", "dag_loss_summary.median",
)


def headline(doc: dict, prefixes: tuple[str, ...] | None) -> str:
    """Markdown table of the rows of ``doc`` whose dotted key starts with one of ``prefixes`` (all if None)."""
    from pldr_ref.diagnostics.report import flatten_rows

    rows = [(k, v) for k, v in flatten_rows({k: v for k, v in doc.items() if k not in ("schema_version", "kind")})
            if prefixes is None or any(k == p or k.startswith(p + ".") for p in prefixes)]
    return "\n".join(["| quantity | value |", "|---|---|", *[f"| `{k}` | {v} |" for k, v in rows]])


def example_twirl() -> tuple[str, dict]:
    from pldr_ref.diagnostics.report import document
    from pldr_ref.diagnostics.twirl import twirl_table

    return "pldr-ref diagnose twirl --d-k 64 --rope-base 10000 --seq-len 64 256 1024", \
        document("twirl", twirl_table(64, 10000.0, (64, 256, 1024)))


def example_g_lm() -> tuple[str, dict]:
    from pldr_ref.diagnostics.g_lm import g_lm_report, load_g_lm
    from pldr_ref.diagnostics.report import document

    g, source = load_g_lm(None)
    return "pldr-ref diagnose g-lm", document("g-lm", g_lm_report(g, source=source))


def _model(preset: str) -> tuple[str, dict]:
    from pldr_ref import PLDRConfig, init_params
    from pldr_ref.diagnostics.model import model_report
    from pldr_ref.diagnostics.report import document
    from pldr_ref.diagnostics.run import make_run, random_prompts

    config = PLDRConfig.preset(preset)
    run = make_run(init_params(config, seed=0), random_prompts(config, 8, 40, seed=0), label=f"{preset} random init")
    rep = model_report(run)
    rep.pop("timings_s")  # machine dependent: reported by the command, not pinned in the doc
    return f"pldr-ref diagnose model --preset {preset} --seed 0 --random-prompts 8 --length 40", document("model", rep)


EXAMPLES: dict[str, tuple[Callable[[], tuple[str, dict]], tuple[str, ...] | None]] = {
    "twirl": (example_twirl, None),
    "g-lm": (example_g_lm, G_LM_KEYS),
    "model-tiny": (lambda: _model("tiny"), MODEL_KEYS),
    "model-v510-110m": (lambda: _model("v510-110m"), MODEL_KEYS),
}


def block(name: str) -> str:
    """The regenerated text of example ``name`` (between its markers)."""
    make, keys = EXAMPLES[name]
    command, doc = make()
    return f"\n```bash\n{command}\n```\n\n{headline(doc, keys)}\n"


def marker_pattern(name: str) -> re.Pattern[str]:
    """Regex of the block of ``name``: group 1 is its content."""
    n = re.escape(name)
    return re.compile(rf"<!-- example:{n}:begin -->(.*?)<!-- example:{n}:end -->", re.S)


def main(names: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    for name in names or list(EXAMPLES):
        if name not in EXAMPLES:
            raise SystemExit(f"unknown example {name!r}; choose from {list(EXAMPLES)}")
        pat = marker_pattern(name)
        if not pat.search(text):
            raise SystemExit(f"{DOC} has no block for example {name!r}")
        new = block(name)
        text = pat.sub(lambda _m, n=name, b=new: f"<!-- example:{n}:begin -->{b}<!-- example:{n}:end -->", text)
        print(f"example {name}: regenerated", file=sys.stderr)
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
